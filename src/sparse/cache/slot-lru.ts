// A doubly linked list of cache slots in recency order (most recent at the head), over two
// caller-owned int32 arrays, so the tables can live in native memory the budget counts.
export class SlotLru {
  head = -1;
  tail = -1;

  constructor(
    private readonly prev: Int32Array,
    private readonly next: Int32Array,
  ) {}

  unlink(s: number): void {
    const p = this.prev[s]!;
    const nx = this.next[s]!;
    if (p >= 0) this.next[p] = nx;
    else this.head = nx;
    if (nx >= 0) this.prev[nx] = p;
    else this.tail = p;
  }

  pushHead(s: number): void {
    this.prev[s] = -1;
    this.next[s] = this.head;
    if (this.head >= 0) this.prev[this.head] = s;
    this.head = s;
    if (this.tail < 0) this.tail = s;
  }

  pushTail(s: number): void {
    this.next[s] = -1;
    this.prev[s] = this.tail;
    if (this.tail >= 0) this.next[this.tail] = s;
    this.tail = s;
    if (this.head < 0) this.head = s;
  }

  /** Most recently used now. */
  touch(s: number): void {
    if (this.head === s) return;
    this.unlink(s);
    this.pushHead(s);
  }

  /** Evicted first from now on. */
  demote(s: number): void {
    if (this.tail === s) return;
    this.unlink(s);
    this.pushTail(s);
  }
}
