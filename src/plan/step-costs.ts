// The bytes each step of a decode token touches, for the per-token time budget (`trace stats`
// prints each step's time beside the time this machine needs to move those bytes). Taken from
// the model file's own tensors, so they are what the kernels read, quantisation included.
import type { GGUFFile } from "../gguf/reader.js";
import { classifierTensor, type ModelConfig } from "../model/config.js";
import type { StepCosts } from "../trace/recorder.js";
import { predictorBytes } from "../sparse/memory-plan.js";
import type { SparseParts } from "../sparse/parts.js";

const ATTENTION = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"];
// a dense FFN, or the one-expert form (smallthinker) whose matrices are named as experts
const FFN = ["ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"];

/** Bytes of the steps of one decode token of this model (a plain model, or a pack with `sparse`). */
export function stepCosts(file: GGUFFile, cfg: ModelConfig, sparse?: Pick<SparseParts, "pack" | "predictor">): StepCosts {
  const bytes = (name: string) => file.tensorsByName.get(name)?.nbytes ?? 0;
  const perLayer = (names: string[]) => {
    let b = 0;
    for (let l = 0; l < cfg.nLayer; l++) for (const n of names) b += bytes(`blk.${l}.${n}.weight`);
    return b / cfg.nLayer;
  };
  const rows = (name: string) => file.tensorsByName.get(name)?.ne[1] ?? 0;
  const attentionRows = ["attn_q", "attn_k", "attn_v", "attn_output"].reduce((a, n) => a + rows(`blk.0.${n}.weight`), 0);
  const classifier = classifierTensor(file);
  const output = bytes(classifier) + bytes("output_norm.weight");
  const costs: StepCosts = {
    nLayer: cfg.nLayer,
    attentionBytes: perLayer(ATTENTION),
    // K and V of one position, F16 (the KV cache type of every decoder that traces)
    kvBytesPerPosition: 2 * cfg.nHeadKv * cfg.headDim * 2,
    attentionHeads: cfg.nHead,
    attentionRows,
    outputBytes: output,
    outputRows: rows(classifier),
    denseFfnBytes: perLayer(FFN),
  };
  if (sparse) {
    const { pack } = sparse;
    costs.gateRowBytes = pack.gateBytes;
    costs.upDownRowBytes = pack.upBytes + pack.downBytes;
    costs.denseFfnBytes = cfg.nFF * (pack.gateBytes + pack.upBytes + pack.downBytes);
    if (sparse.predictor === "trained" && pack.predictor) costs.predictorBytes = predictorBytes(pack);
  }
  return costs;
}
