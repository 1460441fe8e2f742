// A progress bar for long work: cli-progress (a maintained terminal progress bar) on stderr, with
// the rate and the time left; silent when stderr is not a terminal (NEURONPIPE_PROGRESS=1 forces it).
import { SingleBar } from "cli-progress";

/** A progress callback (done, total) drawing a bar on stderr; the bar stops when done reaches total. */
export function progressBar(label: string): (done: number, total: number) => void {
  const tty = process.stderr.isTTY || process.env.NEURONPIPE_PROGRESS === "1";
  if (!tty) return () => {};
  let bar: SingleBar | undefined;
  const t0 = performance.now();
  return (done, total) => {
    if (!bar) {
      bar = new SingleBar({
        format: `${label} [{bar}] {percentage}% | {value}/{total} | {rate}/s | ETA {eta_formatted}`,
        stream: process.stderr,
        noTTYOutput: true, // forced on a pipe: still draw
        etaBuffer: 50,
        hideCursor: false,
        barsize: 30,
      });
      bar.start(total, 0, { rate: "0" });
    }
    const s = (performance.now() - t0) / 1000;
    bar.setTotal(total);
    bar.update(done, { rate: s > 0 ? (done / s).toFixed(done / s >= 100 ? 0 : 1) : "0" });
    if (done >= total) {
      bar.stop();
      bar = undefined;
    }
  };
}
