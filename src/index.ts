// neuronpipe's public API.
export { loadModel, loadSparseModel, Model, type LoadOptions } from "./api/model.js";
export {
  Session,
  type SessionOptions,
  type GenerateOptions,
  type GeneratedPiece,
  type GenerationStats,
  type InspectOption,
} from "./api/session.js";
export type { StopReason } from "../actors/session-machine.js";
export { ChatSession, type ChatSessionOptions, type ChatPromptOptions, type ChatReply } from "./api/chat.js";
export { ChatTemplate, CHATML_TEMPLATE, type ChatMessage } from "./api/chat-template.js";
export { startServer, Server, type ServerOptions } from "./server/server.js";
export { defaultModelPath } from "./api/default-model.js";
// how tokens run through the layers (dense, inline, pipeline, blocking, mmap)
export type { Decoder, DecoderKind, DecodeContext, ContextOptions } from "./decode/decoder.js";
export { DEFAULT_DECODER, type OpenOptions } from "./decode/open.js";
export type { PipelineOptions, PipelineKnobs } from "./decode/pipeline/pipeline.js";
export { TraceRecorder, type TraceRecord } from "./trace/recorder.js";
// watching the actors: the live inspector page, and replay of a recorded trace
export { startInspector, type Inspector, type InspectorOptions } from "./inspect/server.js";
export { readTrace } from "./trace/read.js";
export { replayTrace, type ReplayOptions, type ReplayResult } from "./trace-tools/replay.js";
export type { ModelConfig, FfnActivation } from "./model/config.js";
export { Sampler, defaultSampling, type SamplingOptions } from "./api/sampling.js";
export { readGGUF, GGUFError, type GGUFFile, type TensorInfo } from "./gguf/reader.js";
export { GGUFWriter } from "./gguf/writer.js";
export { synthModel, synthShapes, type SynthShape, type SynthOptions } from "./tools/synth/synth.js";
export { createTokenizer, type Tokenizer } from "./tokenizer/index.js";
export { sessionMachine } from "../actors/session-machine.js";
export { native } from "./native.js";
export { GenerationPool, type WorkerPoolOptions } from "./api/generation-pool.js";
// sparse decoding from a neuron pack under a memory budget
export { SparseParts, type SparseLayerReport, type PredictorMode, type IoOptions } from "./sparse/parts.js";
export { openPack } from "./sparse/pack/open.js";
export { writePack } from "./sparse/pack/write.js";
export { PackError, type Pack } from "./sparse/pack/format.js";
export { planMemory, planOptions, budgetForFfnFraction, describePlan, type MemoryPlan, type PlanOptions } from "./sparse/memory-plan.js";
export { profileActivations } from "./tools/profile.js";
export { readProfile, writeProfile } from "./sparse/profile-file.js";
export { trainPredictors } from "./tools/train-predictor.js";
export { readPredictors, writePredictors } from "./sparse/predictor-file.js";
// the offline planner: plans, their files, and the machine they were made for
export { type ExecutionPlan, type PlanKnobs } from "./plan/planner.js";
export { readPlanFile, writePlanFile } from "./plan/plan-file.js";
export type { MachineBounds } from "./plan/machine.js";
