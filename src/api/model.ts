// A loaded model: configuration, tokenizer and weights mapped from a GGUF file.
import { readGGUF, type GGUFFile } from "../gguf/reader.js";
import { native } from "../native.js";
import { createTokenizer, type Tokenizer } from "../tokenizer/index.js";
import { Session, type SessionOptions } from "./session.js";
import { readConfig, type ModelConfig } from "../model/config.js";
import { vocabFromGGUF } from "../model/vocab.js";
import { bindWeights, type Weights } from "../model/weights.js";
import type { SparseRuntime } from "../decode/sparse-model.js";

export interface LoadOptions {
  /** Native compute threads (default: all online CPUs). Results are identical for any count. */
  threads?: number;
  /** Abort loading (checked between steps). */
  signal?: AbortSignal;
}

export class Model {
  private disposed = false;
  private sessions = new Set<Session>();

  constructor(
    readonly path: string,
    readonly file: GGUFFile,
    readonly config: ModelConfig,
    readonly tokenizer: Tokenizer,
    readonly weights: Weights,
    /** Set when the model was loaded from a neuron pack under a memory budget (loadSparseModel). */
    readonly sparse?: SparseRuntime,
  ) {}

  /** Bytes of the mapped file plus converted tensors. */
  get weightBytes(): number {
    return this.file.fileSize;
  }

  createSession(options: SessionOptions = {}): Session {
    if (this.disposed) throw new Error("model is disposed");
    const s = new Session(this, options);
    this.sessions.add(s);
    s.once("disposed", () => this.sessions.delete(s));
    return s;
  }

  dispose(): void {
    if (this.disposed) return;
    for (const s of [...this.sessions]) s.dispose();
    this.disposed = true;
    const n = native();
    for (const b of this.weights.buffers) n.free(b);
    this.sparse?.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
    await this.sparse?.closed; // the pipeline's worker threads have stopped
  }
}

/** Set the native pool's thread count from a load option (checked; `who` names the caller in the error). */
export function applyThreads(who: string, threads: number | undefined): void {
  if (threads === undefined) return;
  if (!(Number.isInteger(threads) && threads >= 1)) throw new RangeError(`${who}: threads must be a whole number ≥ 1, got ${threads}`);
  native().setThreads(threads);
}

export async function loadModel(path: string, options: LoadOptions = {}): Promise<Model> {
  options.signal?.throwIfAborted();
  const n = native();
  applyThreads("loadModel", options.threads);
  const file = readGGUF(path);
  const config = readConfig(file);
  const tokenizer = createTokenizer(vocabFromGGUF(file));
  options.signal?.throwIfAborted();
  const mapped = n.mapFile(path);
  try {
    const weights = bindWeights(file, config, mapped.id);
    return new Model(path, file, config, tokenizer, weights);
  } catch (e) {
    n.free(mapped.id);
    throw e;
  }
}
