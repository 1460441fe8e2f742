// Spans of a decode step that runs on one thread (the inline and dense decoders): each step
// starts where the previous one ended, so `mark` closes the interval since the last mark.
import { nowUs, type Lane, type SpanName, type SpanRecord, type TraceRecorder } from "../trace/recorder.js";

export class TokenClock {
  readonly t0: number;
  private last: number;

  constructor(
    readonly trace: TraceRecorder,
    readonly step: number,
  ) {
    this.t0 = this.last = nowUs();
  }

  /** Record [last mark, now] as `name` on `lane`. */
  mark(lane: Lane, name: SpanName, layer?: number, extra: Pick<SpanRecord, "neurons" | "bytes" | "reads" | "phase"> = {}): void {
    const now = nowUs();
    this.trace.span({ lane, name, t0: this.last, t1: now, token: this.step, layer, ...extra });
    this.last = now;
  }

  /** The token record, from the clock's start to now. */
  finish(fields: { token: number; pos: number; predicted?: number; fired?: number }): void {
    this.trace.token({ index: this.step, t0: this.t0, t1: nowUs(), ...fields });
  }
}
