// Decode speed of greedy generations through neuronpipe's library, as every in-process benchmark
// measures it: tokens per second from a generation's first token (which follows the prompt's
// prefill) to its last — n − 1 single-token passes — the median of `reps` generations after an
// optional warm-up generation of `warmup` tokens.

/**
 * @param {{ createSession(o: { contextSize?: number }): any }} model a loaded neuronpipe Model
 * @param {{ prompt: string, tokens: number, reps?: number, warmup?: number, contextSize?: number, onFirstToken?: (rep: number) => void }} o
 * @returns {Promise<{ median: number, min: number, max: number, runs: number[] }>}
 */
export async function decodeSpeed(model, { prompt, tokens, reps = 3, warmup = 0, contextSize, onFirstToken }) {
  const s = model.createSession(contextSize === undefined ? {} : { contextSize });
  const runs = [];
  try {
    for (let i = warmup > 0 ? -1 : 0; i < reps; i++) {
      s.reset();
      const it = s.generate(prompt, { maxTokens: i < 0 ? warmup : tokens, temperature: 0 });
      let n = 0;
      let t0 = 0;
      let t1 = 0;
      while (!(await it.next()).done) {
        t1 = performance.now();
        if (++n === 1) {
          t0 = t1;
          if (i >= 0) onFirstToken?.(i);
        }
      }
      if (i >= 0) runs.push((n - 1) / ((t1 - t0) / 1000));
    }
  } finally {
    s.dispose();
  }
  const sorted = [...runs].sort((a, b) => a - b);
  return { median: sorted[(sorted.length - 1) >> 1], min: sorted[0], max: sorted[sorted.length - 1], runs };
}
