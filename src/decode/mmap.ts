// The `mmap` mode: llama.cpp's way on a neuron pack — the whole file memory-mapped, every neuron
// of every layer computed (dense), the kernel's page cache deciding what stays in RAM. It is the
// baseline the sparse modes are measured against on the same file; under a memory cgroup the
// page cache is what the limit squeezes.
import { applyThreads, Model, type LoadOptions } from "../api/model.js";
import type { RunState } from "../model/forward.js";
import { bindWeights } from "../model/weights.js";
import { vocabFromGGUF } from "../model/vocab.js";
import { GateKind, native } from "../native.js";
import { openPack } from "../sparse/pack/open.js";
import { createTokenizer } from "../tokenizer/index.js";
import { bundleLayoutOf, bundleScratchBytes, createBundleScratch, denseBundles } from "../sparse/ffn/dense-bundles.js";

/** Open a neuron pack for dense decoding over a mapping of the file (mode `mmap`). */
export async function loadMappedPack(path: string, opts: LoadOptions = {}): Promise<Model> {
  opts.signal?.throwIfAborted();
  applyThreads("loadMappedPack", opts.threads);
  const n = native();
  const pack = openPack(path);
  const cfg = pack.config;
  if (cfg.activation !== "reglu" && cfg.activation !== "drelu") throw new Error(`${path}: the mmap mode over a pack needs a ReLU-family FFN, got ${cfg.activation}`);
  const { id: map } = n.mapFile(path);
  let scratchBuf = -1;
  try {
    const weights = bindWeights(pack.file, cfg, map, { ffn: false }); // tensors at their file offsets in the mapping
    scratchBuf = n.alloc(bundleScratchBytes(cfg.nFF));
    const scratch = createBundleScratch(cfg.nFF, scratchBuf, 0);
    const layout = bundleLayoutOf(pack, cfg.activation === "reglu" ? GateKind.ReGLU : GateKind.dReLU);
    weights.sparseFfn = {
      run(layer: number, rs: RunState, nTok: number) {
        n.viewF32(rs.buf, rs.o, nTok * cfg.nEmbd).fill(0);
        denseBundles(layout, map, pack.layers[layer]!.bundlesOffset, cfg.nFF, rs, nTok, scratch);
      },
    };
    if (!weights.buffers.includes(map)) weights.buffers.unshift(map);
    weights.buffers.push(scratchBuf);
    return new Model(path, pack.file, cfg, createTokenizer(vocabFromGGUF(pack.file)), weights);
  } catch (e) {
    if (scratchBuf >= 0) n.free(scratchBuf);
    n.free(map);
    throw e;
  }
}
