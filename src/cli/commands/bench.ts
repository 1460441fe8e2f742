// neuronpipe bench: prompt processing and text generation speed, as llama-bench reports them —
// ppN (a prompt of N random tokens, prefilled) and tgN (N tokens generated after a one-token
// prompt), each repeated, mean ± sample standard deviation of tokens/s; markdown or JSON.
import { basename } from "node:path";
import { formatBytes } from "../../util/bytes.js";
import { tensorTypeName } from "../../gguf/types.js";
import type { Model } from "../../api/model.js";
import { MAX_THREADS, num, UsageError, type Command } from "../command.js";
import { defaultModelPath, modelFlags, modelFlagsHelp, openFromFlags } from "../model-flags.js";
import { native } from "../../native.js";

interface Row {
  model: string;
  size: string;
  params: string;
  decoder: string;
  threads: number;
  test: string;
  samples: number[];
  mean: number;
  sd: number;
}

/** The model's weight type: the most common among its 2-D tensors (as llama-bench names a model by its file type). */
function weightType(m: Model): string {
  const count = new Map<string, number>();
  for (const t of m.file.tensors) if (t.ne.length === 2) count.set(tensorTypeName(t.type), (count.get(tensorTypeName(t.type)) ?? 0) + t.ne[0]! * t.ne[1]!);
  return [...count.entries()].sort((a, b) => b[1] - a[1])[0]?.[0] ?? "?";
}

function parameters(m: Model): number {
  let n = 0;
  for (const t of m.file.tensors) n += t.ne.reduce((a, b) => a * b, 1);
  return n;
}

const fmtParams = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : `${(n / 1e6).toFixed(2)} M`);

/** Seeded random token ids that are not control tokens (a prompt llama-bench would also draw at random). */
function randomTokens(m: Model, n: number, seed: number): number[] {
  let x = seed >>> 0 || 1;
  const out: number[] = [];
  while (out.length < n) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    const id = (x >>> 0) % m.config.nVocab;
    if (!m.tokenizer.isControl(id) && !m.tokenizer.isEog(id)) out.push(id);
  }
  return out;
}

const mean = (a: number[]) => a.reduce((s, x) => s + x, 0) / a.length;
const sd = (a: number[]) => (a.length < 2 ? 0 : Math.sqrt(a.reduce((s, x) => s + (x - mean(a)) ** 2, 0) / (a.length - 1)));

export const bench: Command = {
  summary: "prompt processing and generation speed, llama-bench style (pp512, tg128: mean ± sd)",
  usage: "neuronpipe bench [-m PATH] [-p 512] [-n 128] [-r 5] [-t THREADS] [--memory B …] [--json]",
  options: {
    model: { type: "string", short: "m" },
    "n-prompt": { type: "string", short: "p" },
    "n-gen": { type: "string", short: "n" },
    repetitions: { type: "string", short: "r" },
    threads: { type: "string", short: "t" },
    ...modelFlags,
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model file or neuron pack (default: the embedded default model)",
    "n-prompt": "prompt tokens of the pp test (default 512; 0 skips it; cut to fit the context, the name says so)",
    "n-gen": "tokens of the tg test (default 128; 0 skips it)",
    repetitions: "runs of each test after a warm-up run (default 5)",
    threads: "compute threads (default: all CPUs)",
    ...modelFlagsHelp,
    json: "print the results as JSON (llama-bench's fields: n_prompt, n_gen, avg_ts, stddev_ts, samples_ts, …)",
  },
  async run(v, pos) {
    if (pos.length > 0) throw new UsageError(`bench takes no positional arguments, got: ${pos.join(" ")}`);
    const nPrompt = num(v["n-prompt"], "n-prompt", { int: true, min: 0 }) ?? 512;
    const nGen = num(v["n-gen"], "n-gen", { int: true, min: 0 }) ?? 128;
    const reps = num(v.repetitions, "repetitions", { int: true, min: 1 }) ?? 5;
    const threads = num(v.threads, "threads", { int: true, min: 1, max: MAX_THREADS });
    const path = (v.model as string | undefined) ?? defaultModelPath();
    const model = await openFromFlags(path, { ...v, json: true }, { threads });
    try {
      const session = model.createSession();
      const ctx = session.contextSize;
      const rows: Row[] = [];
      const label = `${model.config.arch} ${fmtParams(parameters(model)).replace(" ", "")} ${weightType(model)}`;
      const common = { model: label, size: formatBytes(model.weightBytes), params: fmtParams(parameters(model)), decoder: model.decoder.kind, threads: native().getThreads() };
      const tests: { test: string; run: (rep: number) => Promise<number> }[] = [];
      if (nPrompt > 0) {
        const p = Math.min(nPrompt, ctx - 1);
        tests.push({
          test: p === nPrompt ? `pp${p}` : `pp${p} (of ${nPrompt}: context ${ctx})`,
          run: async (rep) => {
            session.reset();
            const it = session.generate(randomTokens(model, p, rep + 1), { maxTokens: 0 });
            let r = await it.next();
            while (!r.done) r = await it.next();
            return r.value.prefillTokensPerSecond;
          },
        });
      }
      if (nGen > 0) {
        const g = Math.min(nGen, ctx - 2);
        tests.push({
          test: g === nGen ? `tg${g}` : `tg${g} (of ${nGen}: context ${ctx})`,
          run: async (rep) => {
            session.reset();
            // one token of prompt, then g generated; EOS does not end it early (sampling is greedy over random weights or real text, either may stop: count what ran)
            const it = session.generate(randomTokens(model, 1, rep + 1), { maxTokens: g, temperature: 0 });
            let r = await it.next();
            while (!r.done) r = await it.next();
            return r.value.decodeTokensPerSecond;
          },
        });
      }
      for (const t of tests) {
        await t.run(-1); // warm-up
        const samples: number[] = [];
        for (let k = 0; k < reps; k++) samples.push(await t.run(k));
        rows.push({ ...common, test: t.test, samples, mean: mean(samples), sd: sd(samples) });
      }
      session.dispose();
      if (v.json) {
        const out = rows.map((r) => ({
          model_filename: path,
          model_type: r.model,
          model_size: model.weightBytes,
          model_n_params: parameters(model),
          decoder: r.decoder,
          n_threads: r.threads,
          test: r.test,
          n_prompt: r.test.startsWith("pp") ? Number(/^pp(\d+)/.exec(r.test)![1]) : 0,
          n_gen: r.test.startsWith("tg") ? Number(/^tg(\d+)/.exec(r.test)![1]) : 0,
          avg_ts: r.mean,
          stddev_ts: r.sd,
          samples_ts: r.samples,
          ...(model.sparse && { memory: model.sparse.plan.budget }),
        }));
        process.stdout.write(JSON.stringify(out, null, 2) + "\n");
      } else {
        const head = ["model", "size", "params", "decoder", "threads", "test", "t/s"];
        const lines = rows.map((r) => [r.model, r.size, r.params, r.decoder, String(r.threads), r.test, `${r.mean.toFixed(2)} ± ${r.sd.toFixed(2)}`]);
        const w = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
        const right = [false, true, true, false, true, true, true];
        const row = (cells: string[]) => `| ${cells.map((c, i) => (right[i] ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join(" | ")} |`;
        process.stdout.write([row(head), `| ${w.map((n, i) => (right[i] ? "-".repeat(n - 1) + ":" : "-".repeat(n))).join(" | ")} |`, ...lines.map(row)].join("\n") + "\n");
        process.stdout.write(`\n${basename(path)}${model.sparse ? `, --memory ${formatBytes(model.sparse.plan.budget)}` : ""}; ${reps} runs after a warm-up; mean ± sample standard deviation\n`);
      }
    } finally {
      await model.close();
    }
  },
};
