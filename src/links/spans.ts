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
    case "prefill": {
      // the streamed FFN's chunks on the prefill lane (the whole task if it did not say), its reads on the I/O lane
      const c = r.chunks ?? [];
      if (c.length === 0) span("prefill", "prefill", r.t0, r.t1);
      for (let i = 0; i + 3 < c.length; i += 4) span("prefill", "prefill", c[i]!, c[i + 1]!, c[i + 2]!, { neurons: c[i + 3]! });
      const rd = r.readSpans ?? [];
      for (let i = 0; i + 3 < rd.length; i += 4) t.span({ lane: "io", name: "read", t0: rd[i]!, t1: rd[i + 1]!, token: hint.token, layer: rd[i + 2]!, bytes: rd[i + 3]!, reads: 1, phase: "bundle" });
      break;
    }
  }
  if (r.front) front(r.front, L! + 1);
}

