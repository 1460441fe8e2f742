/** Minimal binary heap; `before(a, b)` is true when `a` must be popped before `b`. */
export class Heap<T> {
  private readonly items: T[] = [];
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  push(x: T): void {
    const a = this.items;
    a.push(x);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(a[i]!, a[p]!)) break;
      const t = a[i]!;
      a[i] = a[p]!;
      a[p] = t;
      i = p;
    }
  }

  pop(): T | undefined {
    const a = this.items;
    if (a.length === 0) return undefined;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      const n = a.length;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < n && this.before(a[l]!, a[m]!)) m = l;
        if (r < n && this.before(a[r]!, a[m]!)) m = r;
        if (m === i) break;
        const t = a[i]!;
        a[i] = a[m]!;
        a[m] = t;
        i = m;
      }
    }
    return top;
  }
}
