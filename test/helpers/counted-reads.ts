// What a sparse decode reads, counted by the neuron cache: load a pack with `options`, decode 8
// tokens of "The whale" (not counted), then 96 of " and the sea" (seeded), and return the reads
// and bytes per token beside the plan's prediction for them.
import { loadModel, type LoadOptions } from "../../src/api/model.js";

export async function countedReads(packPath: string, options: LoadOptions): Promise<{ reads: number; bytes: number; predictedReads: number; predictedBytes: number }> {
  const m = await loadModel(packPath, options);
  try {
    const s = m.createSession({ contextSize: options.contextSize });
    for await (const _ of s.generate("The whale", { maxTokens: 8, seed: 1 })) void _;
    m.sparse!.resetStats();
    for await (const _ of s.generate(" and the sea", { maxTokens: 96, seed: 2 })) void _;
    s.dispose();
    const rep = m.sparse!.report();
    const tokens = rep[0]!.tokens;
    const p = m.plan!.predicted;
    return { reads: rep.reduce((a, r) => a + r.reads, 0) / tokens, bytes: rep.reduce((a, r) => a + r.bytesRead, 0) / tokens, predictedReads: p.readsPerToken, predictedBytes: p.readBytesPerToken };
  } finally {
    m.dispose();
  }
}
