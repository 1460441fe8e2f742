// bench/alternate.js's measurement, apart from its command line (test/bench/alternate.test.ts
// runs it): greedy decoding straight on the model's decoder, one knob switched between blocks of
// tokens, each decode step timed.
import { argmax } from "../../dist/src/api/sampling.js";
import { native } from "../../dist/src/native.js";

/** How each knob is read and set: on the decoder (its public fields), or on the native pool. */
const decoderKnob = (name, parse) => ({
  parse,
  get: (d) => field(d, name),
  set: (d, x) => {
    field(d, name);
    d[name] = x;
  },
});
const KNOBS = {
  aheadLayers: decoderKnob("aheadLayers", integer),
  readAhead: decoderKnob("readAhead", boolean),
  readNow: decoderKnob("readNow", boolean),
  demote: decoderKnob("demote", boolean),
  threads: { parse: integer, get: () => native().getThreads(), set: (_d, x) => native().setThreads(x) },
};

function integer(s) {
  const x = Number(s);
  if (!Number.isInteger(x) || x < 1) throw new RangeError(`"${s}" is not a positive integer`);
  return x;
}
function boolean(s) {
  if (s === "true" || s === true) return true;
  if (s === "false" || s === false) return false;
  throw new RangeError(`"${s}" is not true or false`);
}
/** The decoder's value of knob `name`; a decoder without it is refused by name. */
function field(decoder, name) {
  if (!(name in decoder)) throw new RangeError(`the ${decoder.kind} decoder has no knob ${name}`);
  return decoder[name];
}

/** Greedy token ids and per-step times (ms) of `tokens` decode steps after the prompt; before(step) runs ahead of each step. */
async function decodeGreedy(model, prompt, tokens, before) {
  const n = native();
  const d = model.decoder;
  const V = model.config.nVocab;
  const ids = model.tokenizer.encode(prompt, { addBos: model.tokenizer.addBos });
  const limit = model.config.nCtxTrain; // the GGUF's context_length (config.ts: 2048 without one)
  // refused before the first token, not when the context runs out part way through a long run
  if (ids.length + tokens > limit) throw new RangeError(`${ids.length} prompt tokens + ${tokens} to decode = ${ids.length + tokens} positions, more than the model's training context (${limit}): lower --tokens`);
  const ctx = d.createContext({ contextSize: Math.min(limit, ids.length + tokens + 1) });
  try {
    let off = await d.prefill(ctx, ids, 0);
    const out = [];
    const ms = [];
    for (let step = 0; step < tokens; step++) {
      const token = argmax(n.viewF32(ctx.rs.buf, off, V));
      out.push(token);
      before(step);
      const t0 = performance.now();
      off = await d.decode(ctx, token, ids.length + step);
      ms.push(performance.now() - t0);
    }
    return { ids: out, ms };
  } finally {
    d.releaseContext(ctx);
  }
}

const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
function quantile(a, q) {
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.max(0, Math.round(q * (s.length - 1))))];
}

/**
 * Decode `tokens` greedy tokens of `prompt`, setting `knob` to `a` for the first `block` steps,
 * `b` for the next, and so on (the first block of each setting is left out of the figures: warm-up).
 * With check, decode again without switching (setting a) and compare the token ids.
 */
export async function alternate(model, { knob, a, b, tokens, block, prompt, check = false }) {
  const k = KNOBS[knob];
  if (!k) throw new RangeError(`unknown knob "${knob}" (one of ${Object.keys(KNOBS).join(", ")})`);
  const values = [k.parse(a), k.parse(b)];
  const original = k.get(model.decoder);
  try {
    return await measure(model, k, values, { knob, a, b, tokens, block, prompt, check });
  } finally {
    k.set(model.decoder, original); // the decoder (or the pool) as it was
  }
}

/** alternate's generations and figures, the knob set by the caller's `k` to values[0] or values[1]. */
async function measure(model, k, values, { knob, a, b, tokens, block, prompt, check }) {
  const setting = (step) => Math.floor(step / block) % 2;
  const run = await decodeGreedy(model, prompt, tokens, (step) => {
    if (step % block === 0) k.set(model.decoder, values[setting(step)]);
  });
  k.set(model.decoder, values[0]);
  const times = [[], []];
  const blocks = []; // [setting, mean ms] per block, in order
  for (let s = 2 * block; s < tokens; s += block) {
    const t = run.ms.slice(s, Math.min(tokens, s + block));
    times[setting(s)].push(...t);
    blocks.push([setting(s), mean(t)]);
  }
  const ratios = [];
  for (let i = 1; i < blocks.length; i++) if (blocks[i][0] === 1 && blocks[i - 1][0] === 0) ratios.push(blocks[i][1] / blocks[i - 1][1]);
  const stats = (t) => ({ tokens: t.length, meanMs: mean(t), medianMs: quantile(t, 0.5) });
  const r = {
    a: stats(times[0]),
    b: stats(times[1]),
    ratio: mean(times[1]) / mean(times[0]),
    paired: { n: ratios.length, median: quantile(ratios, 0.5), p10: quantile(ratios, 0.1), p90: quantile(ratios, 0.9) },
    block,
    ids: run.ids,
    checked: false,
  };
  if (check) {
    const plain = await decodeGreedy(model, prompt, tokens, () => {});
    const same = plain.ids.length === run.ids.length && plain.ids.every((t, i) => t === run.ids[i]);
    if (!same) throw new Error(`switching ${knob} between ${a} and ${b} changed the tokens: ${run.ids.join(",")} against ${plain.ids.join(",")}`);
    r.checked = true;
  }
  return r;
}
