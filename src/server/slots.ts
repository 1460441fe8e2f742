// The model's sessions, lent to requests one at a time in arrival order (FIFO: no request waits
// behind one that came later), with a bounded waiting line: a request that finds it full is
// refused at once (the server answers 503) rather than queued without limit.
import type { Session } from "../api/session.js";

export class QueueFullError extends Error {
  constructor(readonly waiting: number) {
    super(`server busy: every session is generating and ${waiting} requests are waiting (the limit); retry later`);
  }
}

export class SessionSlots {
  private readonly free: Session[];
  private readonly line: { resolve: (s: Session) => void; reject: (e: unknown) => void }[] = [];

  constructor(
    readonly sessions: readonly Session[],
    /** Requests that may wait for a session; one more is refused. */
    readonly limit: number,
  ) {
    this.free = [...sessions];
  }

  get busy(): number {
    return this.sessions.length - this.free.length;
  }

  get waiting(): number {
    return this.line.length;
  }

  /**
   * A free session for `tokens` — the one already holding the longest prefix of them, so its KV
   * cache is reused — or, when none is free, the next one released (in order of arrival).
   */
  acquire(tokens: readonly number[], signal?: AbortSignal): Promise<Session> {
    signal?.throwIfAborted();
    if (this.free.length > 0) {
      let best = 0;
      let bestLen = -1;
      for (const [i, s] of this.free.entries()) {
        const seq = s.sequence;
        let n = 0;
        while (n < seq.length && n < tokens.length && seq[n] === tokens[n]) n++;
        if (n > bestLen) [best, bestLen] = [i, n];
      }
      return Promise.resolve(this.free.splice(best, 1)[0]!);
    }
    if (this.line.length >= this.limit) return Promise.reject(new QueueFullError(this.line.length));
    return new Promise<Session>((resolve, reject) => {
      const entry = {
        resolve: (s: Session) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(s);
        },
        reject,
      };
      const onAbort = () => {
        const i = this.line.indexOf(entry);
        if (i >= 0) this.line.splice(i, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.line.push(entry);
    });
  }

  release(s: Session): void {
    const next = this.line.shift();
    if (next) next.resolve(s);
    else this.free.push(s);
  }

  /** Refuse everyone waiting (the server is closing). */
  close(reason: Error): void {
    for (const e of this.line.splice(0)) e.reject(reason);
  }
}
