// A compute task's answer as trace spans (lanes compute, predictor, prefill).
import type { SpanHint } from "../protocol/events.js";
import type { ComputeResult } from "../protocol/tasks.js";
import { type SpanName, type TraceRecorder } from "../trace/recorder.js";


/** A task's answer as trace spans: one per step it ran (result.cuts), a chained front's too. */
export function recordSpans(t: TraceRecorder, op: string, hint: SpanHint, r: ComputeResult): void {
  const span = (lane: SpanHint["lane"], name: SpanName, t0: number, t1: number, layer?: number, extra: { cluster?: number; neurons?: number } = {}) =>
    t.span({ lane, name, t0, t1, token: hint.token, layer, ...extra });
  const front = (fr: ComputeResult, layer: number) => {
    const c = fr.cuts ?? [fr.t0, fr.t1];
    span("compute", "attention", c[0]!, c[1]!, layer, { neurons: fr.nP });
    if (c.length >= 4) span("predictor", "predict", c[2]!, c[3]!, layer, { neurons: fr.nP });
    if (c.length >= 6) span("compute", "gate", c[4]!, c[5]!, layer, { cluster: 0, neurons: fr.nP });
  };
  const L = hint.layer;
  switch (op) {
    case "front":
      front(r, L!);
      break;
    case "gate":
      span("compute", "gate", r.t0, r.t1, L, { cluster: hint.cluster, neurons: (r.nA ?? 0) + (r.nSilent ?? 0) });
      break;
    case "back": {
      const c = r.cuts ?? [];
      for (let i = 0; i + 1 < c.length; i += 2) span("compute", i % 4 === 0 ? "up" : "down", c[i]!, c[i + 1]!, L, { cluster: hint.cluster });
      break;
    }
    case "ffn":
      span("compute", "ffn", r.t0, r.t1, L, { cluster: hint.cluster, neurons: r.nA });
      break;
    case "logits":
      span("compute", "logits", r.t0, r.t1);
      break;
    case "prefill":
      // the whole task if it did not say how its FFN went
      if (!r.chunks?.length) span("prefill", "prefill", r.t0, r.t1);
      recordPrefillSpans(t, hint.token, r.chunks ?? [], r.readSpans ?? []);
      break;
  }
  if (r.front) front(r.front, L! + 1);
}

/**
 * A streamed prefill's intervals (StreamedFfn.takeSpans) as spans: each chunk's GEMMs on the
 * prefill lane, each read of its bundles on the I/O lane.
 */
export function recordPrefillSpans(t: TraceRecorder, token: number | undefined, chunks: readonly number[], reads: readonly number[]): void {
  for (let i = 0; i + 3 < chunks.length; i += 4) t.span({ lane: "prefill", name: "prefill", t0: chunks[i]!, t1: chunks[i + 1]!, token, layer: chunks[i + 2]!, neurons: chunks[i + 3]! });
  for (let i = 0; i + 3 < reads.length; i += 4) t.span({ lane: "io", name: "read", t0: reads[i]!, t1: reads[i + 1]!, token, layer: reads[i + 2]!, bytes: reads[i + 3]!, reads: 1, phase: "bundle" });
}
