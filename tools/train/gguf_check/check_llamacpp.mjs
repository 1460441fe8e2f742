// VERIFICATION ONLY: compare llama.cpp (the project's peer, bench/peer) with our reference.
//   node tools/train/gguf_check/check_llamacpp.mjs MODEL_ZERO_FFN.gguf EXPECTED.json
// 1. tokenisation: llama.cpp's SPM tokenizer on each reference prompt == sentencepiece ids
// 2. logits of the zero-ffn_down model == numpy float64 forward (attention/RoPE/norm check);
//    tolerance 5e-2 absolute because llama.cpp keeps the KV cache in F16 (observed ~1.5e-2;
//    the wrong, rotate-half RoPE gives ~7.7 and dozens of argmax mismatches)
import { readFileSync } from "node:fs";
import { openPeer } from "../../../bench/peer/llama-peer.mjs";

const [gguf, expectedPath] = process.argv.slice(2);
const exp = JSON.parse(readFileSync(expectedPath, "utf8"));
const peer = await openPeer(gguf, { threads: 1, contextSize: 256 });
let tokOk = 0, worst = 0, argmaxBad = 0;
for (const p of exp.prompts) {
  const ids = peer.tokenize(p.text, { addBos: true });
  const same = ids.length === p.tokens.length && ids.every((t, i) => t === p.tokens[i]);
  if (same) tokOk++;
  else console.log("TOKEN MISMATCH", JSON.stringify(p.text), "\n llama.cpp", ids.join(","), "\n spm      ", p.tokens.join(","));
  const logits = await peer.teacherForcedLogits(p.tokens);
  for (let i = 0; i < p.tokens.length; i++) {
    const want = p.logits[i];
    let am = 0, bm = 0;
    for (let v = 0; v < want.length; v++) {
      worst = Math.max(worst, Math.abs(logits[i][v] - want[v]));
      if (logits[i][v] > logits[i][am]) am = v;
      if (want[v] > want[bm]) bm = v;
    }
    if (am !== bm) argmaxBad++;
  }
}
console.log(JSON.stringify({ tokenization_identical: `${tokOk}/${exp.prompts.length}`, max_abs_logit_err: worst, argmax_mismatches: argmaxBad }));
await peer.dispose();
process.exit(tokOk === exp.prompts.length && worst < 5e-2 ? 0 : 1);
