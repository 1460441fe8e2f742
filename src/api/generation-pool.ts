// Generation on worker threads: the caller's event loop stays free while a model decodes.
import { MessageChannel, type MessagePort } from "node:worker_threads";
import { Piscina } from "piscina";
import { workerFile } from "../util/package-files.js";
import type { GeneratedPiece, GenerateOptions, GenerationStats } from "./session.js";

/** What the pool hands its worker (workers/generate-worker.ts) for one generation. */
export interface GenerateTask {
  modelPath: string;
  prompt: string;
  threads?: number;
  contextSize?: number;
  options: Omit<GenerateOptions, "signal" | "inspect">;
  /** Receives {type:"piece", text, token}; sends back {type:"abort"} to cancel. */
  port: MessagePort;
}

/** What the worker sends back over the task's port. */
export type WorkerMessage =
  | { type: "piece"; text: string; token: number }
  | { type: "done"; stats: GenerationStats };

export interface WorkerPoolOptions {
  /** Worker threads (default 1: one model decoding at a time uses every core through the native pool). */
  workers?: number;
  /** Native threads each worker's kernels use. */
  threads?: number;
}

/** A pool of worker threads that each keep models loaded and generate on request. */
export class GenerationPool {
  private pool: Piscina;
  constructor(private readonly opts: WorkerPoolOptions = {}) {
    const n = opts.workers ?? 1;
    this.pool = new Piscina({ filename: workerFile("generate-worker"), minThreads: n, maxThreads: n, idleTimeout: Infinity });
  }

  /** Like Session.generate, on a worker thread: an async iterator of pieces returning the stats. */
  async *generate(
    modelPath: string,
    prompt: string,
    options: Omit<GenerateOptions, "inspect"> & { contextSize?: number } = {},
  ): AsyncGenerator<GeneratedPiece, GenerationStats> {
    const { signal, contextSize, ...rest } = options;
    const { port1, port2 } = new MessageChannel();
    const queue: WorkerMessage[] = [];
    let wake: (() => void) | undefined;
    port1.on("message", (m: WorkerMessage) => {
      queue.push(m);
      wake?.();
    });
    const onAbort = () => port1.postMessage({ type: "abort" });
    signal?.addEventListener("abort", onAbort, { once: true });
    const task: GenerateTask = { modelPath, prompt, threads: this.opts.threads, contextSize, options: rest, port: port2 };
    let failed: unknown;
    let finished = false;
    const run = this.pool.run(task, { transferList: [port2] }).then(
      () => (finished = true),
      (e) => {
        failed = e;
        finished = true;
      },
    );
    run.finally(() => wake?.());
    try {
      for (;;) {
        const m = queue.shift();
        if (m?.type === "piece") {
          yield { text: m.text, token: m.token };
          continue;
        }
        if (m?.type === "done") return m.stats;
        // the worker posts "done" before it returns, but its return comes back on piscina's own
        // channel and can overtake the port's last messages: after a success, wait for them
        if (finished && queue.length === 0 && failed) throw failed;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      port1.close();
      await run;
    }
  }

  async dispose(): Promise<void> {
    await this.pool.destroy();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}
