// Sizes as people write and read them: "2GiB" ↔ bytes.

const UNITS: Record<string, number> = { b: 1, k: 1e3, kb: 1e3, kib: 1024, m: 1e6, mb: 1e6, mib: 1024 ** 2, g: 1e9, gb: 1e9, gib: 1024 ** 3, t: 1e12, tb: 1e12, tib: 1024 ** 4 };

/** "2GiB", "512MiB", "1.5GB", "123456" → bytes. */
export function parseBytes(s: string): number {
  const m = /^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$/.exec(s);
  const unit = m?.[2]?.toLowerCase() ?? "";
  const mul = UNITS[unit || "b"];
  if (!m || mul === undefined) throw new RangeError(`cannot read "${s}" as a size (examples: 2GiB, 512MiB, 1500000000)`);
  return Math.round(Number(m[1]) * mul);
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 2 : 1)} ${u[i]}`;
}
