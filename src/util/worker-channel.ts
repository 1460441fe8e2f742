// A direct request/answer channel to one worker thread, for the per-cluster traffic of the
// pipeline. Piscina owns the worker (start, replace, stop) and delivers the session's init task,
// which carries the far end of this channel; after that, descriptors go over the MessagePort
// without piscina's per-task queue, abort signals and timing histograms — at 7B a token posts
// ~1,500 compute tasks and ~700 read batches, and every microsecond the scheduler thread spends
// is taken from a kernel thread on a 2-core machine.
//
//   scheduler                                worker
//   request(msg) ─ {id, msg} ───────────────▶ handler(msg)
//   resolve(id)  ◀──────────── {id, ok} | {id, error}
//
// Answers come in request order (the worker runs one message at a time). If the worker's
// thread exits, its end of the channel closes and every pending request rejects. The pool must
// not park its idle worker in a blocking Atomics.wait (piscina `atomics: "async"`), or the
// worker's event loop — and this channel — stalls between piscina tasks.
import { MessageChannel, type MessagePort } from "node:worker_threads";
import type { Piscina } from "piscina";

interface Answer {
  id: number;
  ok?: unknown;
  error?: string;
}

export class WorkerChannel<Req, Res> {
  private readonly port: MessagePort;
  private remote?: MessagePort;
  private readonly pending = new Map<number, { resolve: (r: Res) => void; reject: (e: Error) => void }>();
  private seq = 0;
  private closedBy?: Error;

  /** `what` names the worker in errors. */
  constructor(readonly what: string) {
    const { port1, port2 } = new MessageChannel();
    this.port = port1;
    this.remote = port2;
    port1.on("message", (a: Answer) => this.answer(a));
    // a worker never closes its end: the far end goes away when its thread exits
    port1.on("close", () => this.fail(new Error(`${what}: its thread exited (crashed or killed): the channel closed`)));
    port1.unref(); // referenced only while requests are pending (see request)
  }

  /** The worker's end, to transfer once in the init task. */
  takeRemote(): MessagePort {
    const r = this.remote;
    if (!r) throw new Error(`${this.what}: the channel's far end was already handed out`);
    this.remote = undefined;
    return r;
  }

  get closed(): boolean {
    return this.closedBy !== undefined;
  }

  request(msg: Req): Promise<Res> {
    if (this.closedBy) return Promise.reject(this.closedBy);
    const id = ++this.seq;
    const p = new Promise<Res>((resolve, reject) => this.pending.set(id, { resolve, reject }));
    if (this.pending.size === 1) this.port.ref(); // an answer is awaited: keep the process alive
    this.port.postMessage({ id, msg });
    return p;
  }

  /** Close our end; pending requests reject with `why`. */
  close(why = "channel closed"): void {
    this.fail(new Error(`${this.what}: ${why}`));
    this.port.close();
    this.remote?.close();
  }

  private answer(a: Answer): void {
    const w = this.pending.get(a.id);
    if (!w) return;
    this.pending.delete(a.id);
    if (this.pending.size === 0) this.port.unref();
    if (a.error !== undefined) w.reject(new Error(`${this.what}: ${a.error}`));
    else w.resolve(a.ok as Res);
  }

  private fail(err: Error): void {
    this.closedBy ??= err;
    for (const w of this.pending.values()) w.reject(this.closedBy);
    this.pending.clear();
    this.port.unref();
  }
}

/**
 * Worker side: answer every request on `port` with handler(msg), in arrival order. `after`, if
 * given, runs once each answer is posted and before the next request: work the answer's
 * receiver need not wait for (it must not throw).
 */
export function serveChannel<Req, Res>(port: MessagePort, handler: (msg: Req) => Res, after?: () => void): void {
  port.on("message", ({ id, msg }: { id: number; msg: Req }) => {
    let a: Answer;
    try {
      a = { id, ok: handler(msg) };
    } catch (e) {
      a = { id, error: (e as Error)?.message ?? String(e) };
    }
    port.postMessage(a);
    after?.();
  });
}

/**
 * Open a channel to the pool's (single) worker: piscina delivers `initFor(port)`. A worker that
 * has just died may still take the init (our channel can learn of the exit before piscina
 * does); piscina then rejects it and starts a new thread, so the init is tried again, up to
 * three times.
 */
export async function openChannel<Req, Res>(
  pool: Piscina,
  what: string,
  initFor: (port: MessagePort) => object,
): Promise<WorkerChannel<Req, Res>> {
  for (let attempt = 1; ; attempt++) {
    const ch = new WorkerChannel<Req, Res>(what);
    const port = ch.takeRemote();
    try {
      await pool.run(initFor(port), { transferList: [port] });
      return ch;
    } catch (e) {
      ch.close("init failed");
      if (attempt >= 3 || !/worker exited|terminated/i.test((e as Error)?.message ?? "")) throw e;
    }
  }
}
