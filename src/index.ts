// neuronpipe's public API.
export { loadModel, Model, type LoadOptions } from "./model/model.js";
export {
  Session,
  type SessionOptions,
  type GenerateOptions,
  type GeneratedPiece,
  type GenerationStats,
} from "./session.js";
export type { ModelConfig, FfnActivation } from "./model/config.js";
export { Sampler, type SamplingOptions } from "./sampling.js";
export { readGGUF, GGUFError, type GGUFFile, type TensorInfo } from "./gguf/reader.js";
export { GGUFWriter } from "./gguf/writer.js";
export { synthModel, synthShapes, type SynthShape, type SynthOptions } from "./synth/synth.js";
export { createTokenizer, type Tokenizer } from "./tokenizer/index.js";
export { sessionMachine } from "../actors/session-machine.js";
export { native } from "./native.js";
export { GenerationPool, type WorkerPoolOptions } from "./worker-pool.js";
// sparse decoding from a neuron pack under a memory budget
export { loadSparseModel, SparseRuntime, type SparseLoadOptions, type SparseLayerReport } from "./sparse/sparse-model.js";
export { openPack, writePack, PackError, type Pack } from "./sparse/pack.js";
export { planMemory, planOptions, budgetForFfnFraction, describePlan, type MemoryPlan, type PlanOptions } from "./sparse/memory-plan.js";
export { profileActivations, readProfile, writeProfile } from "./sparse/profile.js";
export { trainPredictors, readPredictors, writePredictors } from "./sparse/predictor.js";
