// A loaded model: configuration, tokenizer, and the decoder that runs tokens through its layers
// (src/decode/) — dense for a plain GGUF file; inline, pipeline, blocking or mmap for a neuron
// pack under a memory budget.
import type { GGUFFile } from "../gguf/reader.js";
import type { ModelConfig } from "../model/config.js";
import type { Decoder } from "../decode/decoder.js";
import { openModelFile, type OpenOptions } from "../decode/open.js";
import type { SparseParts } from "../sparse/parts.js";
import type { Tokenizer } from "../tokenizer/index.js";
import { TraceRecorder, type TraceHeader } from "../trace/recorder.js";
import type { ExecutionPlan } from "../plan/planner.js";
import { Session, type SessionOptions } from "./session.js";
import { stepCosts } from "../plan/step-costs.js";

/** Load options (src/decode/open.ts): threads and signal for any file, the rest for neuron packs. */
export type LoadOptions = OpenOptions;

export class Model {
  private disposed = false;
  private readonly sessions = new Set<Session>();
  /** Settles when the decoder has released everything (worker threads stopped). */
  private closed: Promise<void> = Promise.resolve();

  constructor(
    readonly path: string,
    readonly file: GGUFFile,
    readonly config: ModelConfig,
    readonly tokenizer: Tokenizer,
    readonly decoder: Decoder,
    /** Set when the model was loaded from a neuron pack under a memory budget: the memory plan, cache and statistics. */
    readonly sparse?: SparseParts,
    /** The execution plan a pack was opened with: its knobs (explicit options override them, listed in `overrides`) and predicted speed. */
    readonly plan?: ExecutionPlan,
  ) {}

  /** Bytes of the model file. */
  get weightBytes(): number {
    return this.file.fileSize;
  }

  /** A trace recorder for generations of this model (to `path`, or kept in memory), its header naming the decoder and the bytes each step of a token touches. */
  createTrace(path?: string): TraceRecorder {
    return new TraceRecorder({ mode: this.decoder.kind, model: this.path, threads: {}, costs: stepCosts(this.file, this.config, this.sparse), ...(this.sparse ? { io: this.sparse.describeIo() } : {}), ...(this.plan ? { plan: this.plan as unknown as TraceHeader["plan"] } : {}) }, path);
  }

  createSession(options: SessionOptions = {}): Session {
    if (this.disposed) throw new Error("model is disposed");
    const s = new Session(this, options);
    this.sessions.add(s);
    s.once("disposed", () => this.sessions.delete(s));
    return s;
  }

  /**
   * Free the model: its sessions are disposed (a generation running stops), and the decoder is
   * freed once no decoder pass runs on any of them (`close()` waits for that).
   */
  dispose(): void {
    if (this.disposed) return;
    const sessions = [...this.sessions];
    const released = sessions.map((s) => s.whenReleased());
    for (const s of sessions) s.dispose();
    this.disposed = true;
    this.closed = Promise.all(released).then(() => this.decoder.dispose());
  }

  /** Dispose and wait until the decoder's worker threads (a pipeline's) have stopped. */
  async close(): Promise<void> {
    this.dispose();
    await this.closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Load a GGUF model or a neuron pack (with `memory`, its budget); see LoadOptions. */
export async function loadModel(path: string, options: LoadOptions = {}): Promise<Model> {
  const m = await openModelFile(path, options);
  return new Model(m.path, m.file, m.config, m.tokenizer, m.decoder, m.sparse, m.plan);
}

/** Load a neuron pack under a memory budget: loadModel with `memory` required. */
export async function loadSparseModel(path: string, options: LoadOptions & { memory: number | string }): Promise<Model> {
  return loadModel(path, options);
}
