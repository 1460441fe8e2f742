// The per-token time budget (src/trace-tools/budget.ts) and what it stands on: the memory
// bandwidth probe against a JS sum of the same words; the budget of a hand-made trace against
// figures computed by hand; traces of the inline and dense decoders — the oracle predictor's
// neurons per token against the model's layer count and width, the fired ones against a dense
// evaluation of the same tokens counting positive gate pre-activations; the CLI prints the table.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, loadSparseModel, type Model } from "../../src/api/model.js";
import { runCli } from "../helpers/cli.js";
import { native } from "../../src/native.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { writePack } from "../../src/sparse/pack/write.js";
import { readTrace } from "../../src/trace/read.js";
import type { SpanRecord, TokenRecord, TraceRecord } from "../../src/trace/recorder.js";
import { tokenBudget } from "../../src/trace-tools/budget.js";
import { measureDisk, type MachineBounds } from "../../src/plan/machine.js";

const root = join(import.meta.dirname, "..", "..");
const defaultModel = join(root, "models", "neuronpipe-default.gguf");
const dir = mkdtempSync(join(tmpdir(), "np-budget-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const packPath = join(dir, "default.pack.gguf");
const n = native();

beforeAll(async () => {
  await writePack(defaultModel, packPath, { profile: `${defaultModel}.profile.gguf`, predictor: `${defaultModel}.predictor.gguf` });
}, 120_000);

describe("machine bounds", () => {
  it("readBandwidth sums the buffer's 64-bit words (low 48 bits), on 1 and 2 threads", () => {
    const bytes = 3 * 2 ** 20 + 640; // not a whole number of 1 MiB chunks
    const buf = n.alloc(bytes);
    try {
      const u8 = n.viewU8(buf, 0, bytes);
      let x = 7;
      for (let i = 0; i < bytes; i++) u8[i] = (x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 24;
      const words = new BigUint64Array(u8.buffer, u8.byteOffset, bytes / 8);
      let sum = 0n;
      for (const w of words) sum = (sum + w) & ((1n << 64n) - 1n);
      const want = Number(sum & ((1n << 48n) - 1n));
      expect(n.readBandwidth(buf, bytes, 1)).toBe(want);
      expect(n.readBandwidth(buf, bytes, 2)).toBe(want);
      expect(() => n.readBandwidth(buf, bytes - 8, 1)).toThrow(/readBandwidth: bytes .* not a multiple of 64/);
      expect(() => n.readBandwidth(buf, bytes + 64, 1)).toThrow(/readBandwidth: buffer .* too small/);
    } finally {
      n.free(buf);
    }
  });

  it("measureDisk reads the file with direct I/O and reports positive rates; a tiny file is refused by name", () => {
    const d = measureDisk(packPath, { seqBytes: 64 * 2 ** 20, randomReads: 2000 });
    expect(d.directIO).toBe(true);
    expect(d.sequentialGBps).toBeGreaterThan(0);
    expect(d.random4kIops).toBeGreaterThan(0);
    expect(() => measureDisk(join(root, "package.json"))).toThrow(/package\.json: \d+ bytes is too small to measure reads on/);
  });
});

describe("neuronpipe machine", () => {
  const cli = (args: string[]) => runCli(args, { NEURONPIPE_CACHE_DIR: join(dir, "cache") });

  it("measures memory and the file's storage, keeps them, and answers from the cache the next time", async () => {
    const first = await cli(["machine", "--file", packPath, "--json"]);
    expect(first.code).toBe(0);
    const b = JSON.parse(first.out) as MachineBounds;
    expect(b.memory.map((m) => m.threads)).toContain(1);
    expect(b.memory.every((m) => m.readGBps > 0)).toBe(true);
    expect(b.disk?.path).toBe(packPath);
    const cached = JSON.parse(readFileSync(join(dir, "cache", "machine.json"), "utf8")) as MachineBounds;
    expect(cached.measuredAt).toBe(b.measuredAt);
    const second = await cli(["machine"]);
    expect(second.out).toMatch(new RegExp(`cached, measured ${b.measuredAt}`));
  }, 60_000);

  it("refuses a missing file and stray arguments by name", async () => {
    const missing = await cli(["machine", "--file", join(dir, "nope.gguf")]);
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/--file .*nope\.gguf does not exist/);
    const stray = await cli(["machine", "extra"]);
    expect(stray.code).toBe(2);
    expect(stray.err).toMatch(/machine takes no positional arguments, got: extra/);
  });
});

describe("tokenBudget", () => {
  // 1000 bytes/µs of memory; storage 2 bytes/µs sequential, 10^4 reads/s
  const machine: MachineBounds = { version: 2, measuredAt: "", host: "h", cpu: "c", memory: [{ threads: 1, readGBps: 0.5 }, { threads: 2, readGBps: 1 }], disk: { path: "/x", backend: "pread", directIO: true, sequentialGBps: 0.002, random4kIops: 1e4, queueDepth: 32 } };
  const span = (lane: SpanRecord["lane"], name: SpanRecord["name"], t0: number, t1: number, extra: Partial<SpanRecord> = {}): SpanRecord => ({ kind: "span", lane, name, t0, t1, ...extra });
  const records: TraceRecord[] = [
    { kind: "header", version: 2, mode: "inline", model: "m", startedAt: "", threads: {}, costs: { nLayer: 2, attentionBytes: 1000, kvBytesPerPosition: 10, outputBytes: 500, denseFfnBytes: 3000, gateRowBytes: 10, upDownRowBytes: 20, predictorBytes: 100 } },
    // the prefill pass: not a decode token
    span("compute", "attention", -50, -10),
    { kind: "token", index: -1, t0: -50, t1: -5 },
    span("compute", "attention", 0, 10),
    span("predictor", "predict", 10, 15),
    span("compute", "gate", 15, 25),
    span("io", "read", 35, 45, { bytes: 4096, reads: 1 }),
    span("compute", "up", 25, 30),
    span("compute", "down", 30, 35),
    span("compute", "attention", 50, 60),
    span("compute", "logits", 90, 100),
    { kind: "token", index: 0, t0: 0, t1: 100, pos: 4, predicted: 8, fired: 3 } satisfies TokenRecord,
  ];

  it("times each step inside the token, and bounds its bytes by the machine's bandwidths (hand-computed)", () => {
    const b = tokenBudget(records, machine)!;
    const row = (s: string) => b.rows.find((r) => r.step === s)!;
    expect(b.tokens).toBe(1);
    // 2 layers × (1000 weight bytes + 10 bytes × 5 positions)
    expect(row("attention")).toEqual({ step: "attention", us: 20, bytes: 2100, boundUs: 2.1 });
    expect(row("predictor")).toEqual({ step: "predictor", us: 5, bytes: 100, boundUs: 0.1 });
    expect(row("gate")).toEqual({ step: "gate", us: 10, bytes: 80, boundUs: 0.08 });
    expect(row("up/down")).toEqual({ step: "up/down", us: 10, bytes: 60, boundUs: 0.06 });
    expect(row("FFN total")).toEqual({ step: "FFN total", us: 20, bytes: 140, boundUs: 0.14 });
    expect(row("output")).toEqual({ step: "output", us: 10, bytes: 500, boundUs: 0.5 });
    // the read ran while no kernel did; 4096 B at 2 B/µs = 2048 µs > one 4 KiB read at 10^4/s = 100 µs
    expect(row("reads waited for")).toEqual({ step: "reads waited for", us: 10, bytes: 4096, requests: 1, boundUs: 2048 });
    // kernels cover [0,35] ∪ [50,60] ∪ [90,100] = 55 µs, the read 10 more: 35 µs of nothing
    expect(row("orchestration").us).toBe(35);
    expect(row("token")).toEqual({ step: "token", us: 100, bytes: 2840, boundUs: 2048 });
    expect([b.predicted, b.fired]).toEqual([8, 3]);
  });

  it("has no budget without step costs in the header or without decode tokens", () => {
    const noCosts = records.map((r) => (r.kind === "header" ? { ...r, costs: undefined } : r));
    expect(tokenBudget(noCosts, machine)).toBeUndefined();
    expect(tokenBudget(records.filter((r) => r.kind !== "token" || r.index < 0), machine)).toBeUndefined();
  });
});

describe("traces of the decoders that run on the calling thread", () => {
  let inlineCounts: number[][] = [];
  /** Greedy generation of `count` tokens traced to a file: the ids and the trace's records. */
  async function traced(m: Model, name: string, prompt: string, count: number) {
    const path = join(dir, `${name}.jsonl`);
    const s = m.createSession({ contextSize: 128 });
    const ids: number[] = [];
    try {
      for await (const p of s.generate(prompt, { maxTokens: count, temperature: 0, trace: path })) if (p.token >= 0) ids.push(p.token);
    } finally {
      s.dispose();
    }
    return { ids, records: readTrace(path) };
  }

  it("inline, oracle predictor: every neuron predicted, and the fired ones are the dense model's positive gates, token by token", async () => {
    const pack = openPack(packPath);
    const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: 128, predictor: false }));
    const m = await loadSparseModel(packPath, { memory, predictor: "oracle", decoder: "inline", contextSize: 128 });
    let run: Awaited<ReturnType<typeof traced>>;
    try {
      run = await traced(m, "inline", "The whale", 12);
    } finally {
      await m[Symbol.asyncDispose]();
    }
    const { nLayer, nFF } = pack.config;
    const tokens = run.records.filter((r): r is TokenRecord => r.kind === "token" && r.index >= 0);
    expect(tokens.length).toBe(11); // the last token is never evaluated
    inlineCounts = tokens.map((t) => [t.predicted!, t.fired!]);
    // the reference: the dense model on the same tokens, counting gate pre-activations > 0
    const dense = await loadModel(defaultModel);
    const s = dense.createSession({ contextSize: 128 });
    try {
      s.evaluate(dense.tokenizer.encode("The whale", { addBos: true }));
      tokens.forEach((t, i) => {
        let fired = 0;
        s.evaluate([run.ids[i]!], false, {
          onFfnActivations: (_l, rs, nTok) => {
            for (const g of n.viewF32(rs.buf, rs.gate, nTok * nFF)) if (g > 0) fired++;
          },
        });
        expect(t.predicted, `token ${i}`).toBe(nLayer * nFF);
        expect(t.fired, `token ${i}`).toBe(fired);
        // every layer's steps are in the trace
        const spans = run.records.filter((r): r is SpanRecord => r.kind === "span" && r.token === t.index);
        for (const name of ["attention", "predict", "gate", "up", "down"] as const) expect(new Set(spans.filter((x) => x.name === name).map((x) => x.layer)).size, name).toBe(nLayer);
        expect(spans.filter((x) => x.name === "logits").length).toBe(1);
      });
    } finally {
      s.dispose();
      dense.dispose();
    }
    // the header's costs are the pack's row sizes
    const header = run.records[0]!;
    expect(header.kind === "header" && header.costs).toMatchObject({ nLayer, gateRowBytes: pack.gateBytes, upDownRowBytes: pack.upBytes + pack.downBytes });
  }, 120_000);

  it("pipeline, oracle predictor: the same neurons per token as inline", async () => {
    expect(inlineCounts.length).toBe(11);
    const pack = openPack(packPath);
    const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: 128, predictor: false }));
    const m = await loadSparseModel(packPath, { memory, predictor: "oracle", decoder: "pipeline", contextSize: 128 });
    try {
      const run = await traced(m, "pipeline", "The whale", 12);
      const tokens = run.records.filter((r): r is TokenRecord => r.kind === "token" && r.index >= 0);
      expect(tokens.map((t) => [t.predicted, t.fired])).toEqual(inlineCounts);
    } finally {
      await m[Symbol.asyncDispose]();
    }
  }, 120_000);

  it("dense: attention and FFN of every layer and the logits, with the FFN's bytes from the model file; trace stats prints the budget", async () => {
    const m = await loadModel(defaultModel);
    let run: Awaited<ReturnType<typeof traced>>;
    try {
      run = await traced(m, "dense", "The whale", 6);
      const spans = run.records.filter((r): r is SpanRecord => r.kind === "span" && r.token === 0);
      expect(spans.filter((x) => x.name === "attention").map((x) => x.layer)).toEqual([...Array(m.config.nLayer).keys()]);
      expect(spans.filter((x) => x.name === "ffn").length).toBe(m.config.nLayer);
      const header = run.records[0]!;
      const ffnBytes = ["gate", "up", "down"].reduce((a, k) => a + m.file.tensorsByName.get(`blk.0.ffn_${k}_exps.weight`)!.nbytes, 0);
      expect(header.kind === "header" && header.costs?.denseFfnBytes).toBe(ffnBytes);
    } finally {
      m.dispose();
    }
    const stats = await runCli(["trace", "stats", join(dir, "dense.jsonl")], { NEURONPIPE_CACHE_DIR: dir });
    expect(stats.code).toBe(0);
    const out = stats.out;
    expect(out).toMatch(/per-token time budget \(5 decode tokens/);
    expect(out).toMatch(/gate\+up\+down +[\d.]+ +\d+% +[\d.]+/);
    expect(out).toMatch(/memory [\d.]+ GB\/s on 1 thread/);
  }, 120_000);
});
