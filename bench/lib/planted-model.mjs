// Synthetic planted-ReGLU Q4_0 models of several sizes, built once into a directory and reused
// (bench/sizes.js, bench/planner.js --parts synthetic): synth --gate-rank 64 (~10% of neurons
// fire, activations predictable from x), a corpus of uniformly random tokens (what a random-weight
// model writes: its activations are profiled and its predictors trained on the distribution it
// decodes), profile, train-predictor with its defaults, pack.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const rootDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const cli = join(rootDir, "bin", "neuronpipe.js");

// name, synth shape (Llama-style), approximate Q4_0 size
export const PLANTED_SIZES = [
  { name: "s-230m", args: ["--embd", "1024", "--ff", "4096", "--layers", "20", "--heads", "16", "--kv-heads", "16"] },
  { name: "m-540m", args: ["--embd", "2048", "--ff", "5632", "--layers", "16", "--heads", "16", "--kv-heads", "16"] },
  { name: "l-1.2g", args: ["--embd", "2048", "--ff", "8192", "--layers", "32", "--heads", "16", "--kv-heads", "16"] },
];

/** Build (or reuse) `size`'s model, profile, predictors and pack in `dir`; `log` names each step. */
export async function buildPlantedModel(size, { dir, threads = 2, log = () => {} }) {
  const run = (args, what) => {
    log(`${what}: neuronpipe ${args.join(" ")}`);
    const r = spawnSync(process.execPath, [cli, ...args], { stdio: ["ignore", "ignore", "inherit"] });
    if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status})`);
  };
  mkdirSync(dir, { recursive: true });
  const model = join(dir, `${size.name}-q4_0.gguf`);
  const corpus = join(dir, "random-tokens-llama2-seed1-12k.txt");
  const pack = join(dir, `${size.name}-q4_0.pack.gguf`);
  if (!existsSync(model)) run(["synth", ...size.args, "--type", "q4_0", "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "64", "--seed", "1", "--out", model], "synth");
  if (!existsSync(corpus)) {
    const np = await import(pathToFileURL(join(rootDir, "dist", "src", "index.js")).href);
    const { vocabFromGGUF } = await import(pathToFileURL(join(rootDir, "dist", "src", "model", "vocab.js")).href);
    const tok = np.createTokenizer(vocabFromGGUF(np.readGGUF(model)));
    let s = 1;
    const ids = [];
    while (ids.length < 12000) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0; // the LCG of bench/sparse.js
      ids.push(259 + (s % (tok.vocabSize - 259)));
    }
    writeFileSync(corpus, tok.decode(ids));
  }
  if (!existsSync(`${model}.profile.gguf`)) run(["profile", "--model", model, "--corpus", corpus, "--max-tokens", "1024", "--ctx", "256", "--threads", String(threads)], "profile");
  if (!existsSync(`${model}.predictor.gguf`)) run(["train-predictor", "--model", model, "--corpus", corpus, "--max-tokens", "10000", "--threads", String(threads)], "train-predictor");
  if (!existsSync(pack)) run(["pack", "--model", model, "--out", pack], "pack");
  return { model, pack };
}
