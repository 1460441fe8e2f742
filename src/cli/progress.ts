// A progress bar for long work (stderr, only on a terminal or when forced).

/** A progress callback (done, total) drawing a bar on stderr; silent when stderr is not a terminal. */
export function progressBar(label: string): (done: number, total: number) => void {
  const tty = process.stderr.isTTY || process.env.NEURONPIPE_PROGRESS === "1";
  let last = -1;
  return (done, total) => {
    if (!tty) return;
    const pct = total > 0 ? Math.floor((done / total) * 100) : 100;
    if (pct === last) return;
    last = pct;
    const w = 30;
    const fill = Math.round((pct / 100) * w);
    process.stderr.write(`\r${label} [${"#".repeat(fill)}${"-".repeat(w - fill)}] ${pct}%${pct >= 100 ? "\n" : ""}`);
  };
}
