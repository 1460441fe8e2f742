// Trace tools (read, stats, Chrome export, SVG plot, CLI) against small hand-built traces whose
// answers were worked out on paper, not taken from the code's own output.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { traceCommand } from "../../src/cli/commands/trace.js";
import { TraceRecorder, type TraceRecord } from "../../src/trace/recorder.js";
import { toChromeTrace, type ChromeEvent } from "../../src/trace-tools/export.js";
import { niceStep, traceSvg } from "../../src/trace-tools/plot.js";
import { readTrace } from "../../src/trace/read.js";
import { intersectionOfUnions, percentile, traceStats, unionLength } from "../../src/trace-tools/stats.js";

const dir = mkdtempSync(join(tmpdir(), "np-trace-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const header: TraceRecord = { kind: "header", version: 1, mode: "pipeline", model: "tiny", startedAt: "2025-01-01T00:00:00.000Z", threads: {} };

/*
 * The worked example (µs):
 *   io:        [0,20] [10,30] [50,60]          ∪io = [0,30] ∪ [50,60]            = 40
 *   compute:   [10,35]; predictor: [55,70]     ∪compute (decode) = [10,35] ∪ [55,70] = 40
 *   prefill:   [80,90]                         ∪compute = 40 + 10                 = 50
 *   scheduler: [0,100]                         not compute, not I/O
 *   ∪io ∩ ∪compute = [10,30] ∪ [55,60] = 20 + 5 = 25 → hidden share 25/40 = 0.625
 *   token 0 [0,50]:  kernel |[10,35]| = 25; io wait |[0,10]| = 10; orchestration 50−35 = 15
 *   token 1 [50,80]: kernel |[55,70]| = 15; io wait |[50,55]| = 5; orchestration 30−20 = 10
 *   prefill [80,100]: kernel 10, io wait 0, orchestration 10 (excluded from the shares)
 *   orchestration share = (15 + 10) / (50 + 30) = 0.3125; latencies 0.05 ms, 0.03 ms
 */
const example: TraceRecord[] = [
  header,
  { kind: "span", lane: "scheduler", name: "plan", t0: 0, t1: 100 },
  { kind: "span", lane: "io", name: "read", t0: 0, t1: 20, layer: 3, cluster: 5, bytes: 4096, reads: 2, phase: "gate" },
  { kind: "span", lane: "io", name: "read", t0: 10, t1: 30, layer: 3, cluster: 6 },
  { kind: "span", lane: "compute", name: "gate", t0: 10, t1: 35, token: 0, layer: 3, cluster: 5, neurons: 12 },
  { kind: "span", lane: "io", name: "read", t0: 50, t1: 60 },
  { kind: "span", lane: "predictor", name: "predict", t0: 55, t1: 70, layer: 0 },
  { kind: "span", lane: "prefill", name: "prefill", t0: 80, t1: 90 },
  { kind: "token", index: 0, t0: 0, t1: 50, token: 42 },
  { kind: "token", index: 1, t0: 50, t1: 80 },
  { kind: "token", index: -1, t0: 80, t1: 100 },
  { kind: "actor", t: 5, type: "@xstate.event", actor: "session", event: "NEXT", source: "cli" },
];

const toJsonl = (records: readonly unknown[]) => records.map((r) => JSON.stringify(r)).join("\n") + "\n";

function writeTemp(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

describe("interval arithmetic", () => {
  it("unionLength counts overlapping time once", () => {
    expect(unionLength([])).toBe(0);
    expect(unionLength([[0, 10], [5, 15], [20, 25]])).toBe(20);
    expect(unionLength([[20, 25], [0, 10], [5, 15]])).toBe(20); // order does not matter
    expect(unionLength([[0, 5], [5, 10]])).toBe(10); // touching
    expect(unionLength([[0, 100], [10, 20], [30, 40]])).toBe(100); // nested
    expect(unionLength([[3, 3]])).toBe(0);
  });

  it("intersectionOfUnions is |(∪a) ∩ (∪b)|", () => {
    expect(intersectionOfUnions([[0, 10], [20, 30]], [[5, 25]])).toBe(10);
    expect(intersectionOfUnions([[0, 10], [0, 10]], [[0, 10]])).toBe(10); // not 20: a is a union
    expect(intersectionOfUnions([[0, 10]], [[10, 20]])).toBe(0);
    expect(intersectionOfUnions([[0, 30], [50, 60]], [[10, 35], [55, 70]])).toBe(25);
    expect(intersectionOfUnions([], [[0, 1]])).toBe(0);
  });

  it("percentile is nearest-rank", () => {
    // the nearest-rank example on Wikipedia's "Percentile" page
    const w = [15, 20, 35, 40, 50];
    expect(percentile(w, 5)).toBe(15);
    expect(percentile(w, 30)).toBe(20);
    expect(percentile(w, 40)).toBe(20);
    expect(percentile(w, 50)).toBe(35);
    expect(percentile(w, 100)).toBe(50);
    const ten = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    expect([0, 50, 90, 99, 100].map((p) => percentile(ten, p))).toEqual([1, 5, 9, 10, 10]);
    // 7% of 100 is rank 7 exactly (0.07 × 100 in floating point is 7.000000000000001)
    expect(percentile(Array.from({ length: 100 }, (_, i) => i + 1), 7)).toBe(7);
    expect(() => percentile([], 50)).toThrow(/empty/);
  });
});

describe("traceStats", () => {
  const s = traceStats(example);

  it("measures I/O, compute and their overlap as unions", () => {
    expect(s.ioUs).toBe(40);
    expect(s.computeUs).toBe(50);
    expect(s.ioHiddenUs).toBe(25);
    expect(s.ioHiddenShare).toBe(0.625);
  });

  it("splits each token into kernel, I/O wait and orchestration", () => {
    expect(s.tokens).toEqual([
      { index: 0, us: 50, kernelUs: 25, ioWaitUs: 10, orchestrationUs: 15 },
      { index: 1, us: 30, kernelUs: 15, ioWaitUs: 5, orchestrationUs: 10 },
      { index: -1, us: 20, kernelUs: 10, ioWaitUs: 0, orchestrationUs: 10 },
    ]);
    expect(s.orchestrationShare).toBe(0.3125);
  });

  it("latency covers decode tokens only", () => {
    expect(s.latencyMs.count).toBe(2);
    expect(s.latencyMs.mean).toBeCloseTo(0.04, 12);
    expect(s.latencyMs.p50).toBe(0.03);
    expect(s.latencyMs.p90).toBe(0.05);
    expect(s.latencyMs.p99).toBe(0.05);
  });

  it("a trace without I/O or tokens gives zeros, not NaN", () => {
    const t = traceStats([header, { kind: "span", lane: "compute", name: "ffn", t0: 0, t1: 7 }]);
    expect(t).toEqual({ ioUs: 0, computeUs: 7, ioHiddenUs: 0, ioHiddenShare: 0, tokens: [], orchestrationShare: 0, latencyMs: { mean: 0, p50: 0, p90: 0, p99: 0, count: 0 } });
  });

  it("orchestration of a token is the time neither lane was busy: 7 µs here", () => {
    // token [0,20]: compute [2,8] ∪ [6,10] = [2,10] → kernel 8;
    // io [9,14] ∪ [17,18] minus compute = [10,14] ∪ [17,18] → io wait 5; 20 − 8 − 5 = 7
    const t = traceStats([
      header,
      { kind: "span", lane: "compute", name: "gate", t0: 2, t1: 8 },
      { kind: "span", lane: "compute", name: "up", t0: 6, t1: 10 },
      { kind: "span", lane: "io", name: "read", t0: 9, t1: 14 },
      { kind: "span", lane: "io", name: "read", t0: 17, t1: 18 },
      { kind: "span", lane: "io", name: "read", t0: 30, t1: 40 }, // after the token
      { kind: "token", index: 0, t0: 0, t1: 20 },
    ]);
    expect(t.tokens[0]).toEqual({ index: 0, us: 20, kernelUs: 8, ioWaitUs: 5, orchestrationUs: 7 });
  });
});

describe("traceStats at token boundaries", () => {
  it("splits spans that straddle two tokens between them", () => {
    // compute [5,15] and io [8,25] both cross the token boundary at 10
    // token 0 [0,10]:  kernel |[5,10]| = 5, io wait 0 (io under compute until 15), orchestration 5
    // token 1 [10,20]: kernel |[10,15]| = 5, io wait |[15,20]| = 5, orchestration 0
    const t = traceStats([
      header,
      { kind: "span", lane: "compute", name: "down", t0: 5, t1: 15 },
      { kind: "span", lane: "io", name: "read", t0: 8, t1: 25 },
      { kind: "token", index: 0, t0: 0, t1: 10 },
      { kind: "token", index: 1, t0: 10, t1: 20 },
    ]);
    expect(t.tokens).toEqual([
      { index: 0, us: 10, kernelUs: 5, ioWaitUs: 0, orchestrationUs: 5 },
      { index: 1, us: 10, kernelUs: 5, ioWaitUs: 5, orchestrationUs: 0 },
    ]);
    expect([t.ioUs, t.computeUs, t.ioHiddenUs]).toEqual([17, 10, 7]);
    expect(t.orchestrationShare).toBe(0.25);
  });
});

describe("readTrace", () => {
  it("reads back what TraceRecorder wrote, skipping blank lines", () => {
    const p = join(dir, "rec.jsonl");
    const rec = new TraceRecorder({ mode: "pipeline", model: "tiny", threads: { compute: 7 } }, p);
    rec.span({ lane: "io", name: "read", t0: rec.origin + 3, t1: rec.origin + 9, bytes: 10 });
    rec.token({ index: 0, t0: rec.origin, t1: rec.origin + 12 });
    rec.actor({ type: "@xstate.actor", actor: "session" });
    rec.close();
    writeFileSync(p, readFileSync(p, "utf8").replace("\n", "\n\n  \n") + "\n");
    const records = readTrace(p);
    expect(records).toEqual(rec.records);
    expect(records[1]).toEqual({ kind: "span", lane: "io", name: "read", t0: 3, t1: 9, bytes: 10 });
  });

  const bad = (name: string, lines: string[]) => writeTemp(name, lines.join("\n") + "\n");
  const h = JSON.stringify(header);

  it("names the file and line of a line that is not JSON", () => {
    const p = bad("notjson.jsonl", [h, "", '{"kind":"token","index":0,"t0":0,"t1":1}', '{"kind":"span",']);
    expect(() => readTrace(p)).toThrow(`${p}:4: not JSON`);
  });

  it("rejects an unknown kind", () => {
    const p = bad("kind.jsonl", [h, '{"kind":"spam","t0":0}']);
    expect(() => readTrace(p)).toThrow(`${p}:2: unknown record kind "spam"`);
  });

  it("requires the header first", () => {
    const p = bad("noheader.jsonl", ['{"kind":"token","index":0,"t0":0,"t1":1}', h]);
    expect(() => readTrace(p)).toThrow(new RegExp(`^${escapeRe(p)}:1: first line must be the header`));
    expect(() => readTrace(writeTemp("empty.jsonl", "\n\n"))).toThrow(/empty trace/);
  });

  it("rejects spans ending before they start, and non-finite times", () => {
    const p = bad("backwards.jsonl", [h, '{"kind":"span","lane":"io","name":"read","t0":10,"t1":9}']);
    expect(() => readTrace(p)).toThrow(`${p}:2: span: ends before it starts (t1=9 < t0=10)`);
    const q = bad("inf.jsonl", [h, '{"kind":"span","lane":"io","name":"read","t0":0,"t1":1e999}']);
    expect(() => readTrace(q)).toThrow(`${q}:2: span: t0 and t1 must be finite`);
    const r = bad("missing.jsonl", [h, '{"kind":"span","lane":"io","name":"read","t0":0}']);
    expect(() => readTrace(r)).toThrow(`${r}:2: span: t0 and t1 must be finite`);
  });

  it("rejects other versions and unknown lanes", () => {
    // version 2 (replayable actor records) is current; a version this reader does not know is refused
    const p = bad("v3.jsonl", [JSON.stringify({ ...header, version: 3 })]);
    expect(() => readTrace(p)).toThrow(`${p}:1: unsupported trace version 3`);
    const q = bad("lane.jsonl", [h, '{"kind":"span","lane":"gpu","name":"read","t0":0,"t1":1}']);
    expect(() => readTrace(q)).toThrow(`${q}:2: span: unknown lane "gpu"`);
  });
});

describe("toChromeTrace", () => {
  const chrome = toChromeTrace(example);
  const ev = chrome.traceEvents;
  const find = (f: (e: ChromeEvent) => boolean) => {
    const hits = ev.filter(f);
    expect(hits).toHaveLength(1);
    return hits[0]!;
  };

  it("is plain JSON in ms display units", () => {
    expect(JSON.parse(JSON.stringify(chrome))).toEqual(chrome);
    expect(chrome.displayTimeUnit).toBe("ms");
    // 11 records after the header + process_name + 7 lanes × (thread_name, thread_sort_index)
    expect(ev).toHaveLength(11 + 1 + 14);
    expect(ev.every((e) => e.pid === 1)).toBe(true);
  });

  it("names the process and each lane in a fixed order", () => {
    expect(find((e) => e.name === "process_name").args).toEqual({ name: "neuronpipe pipeline" });
    const threads = ev.filter((e) => e.ph === "M" && e.name === "thread_name").map((e) => [e.tid, e.args?.name]);
    expect(threads).toEqual([[1, "scheduler"], [2, "predictor"], [3, "compute"], [4, "io"], [5, "prefill"], [6, "tokens"], [7, "actors"]]);
    expect(find((e) => e.name === "thread_sort_index" && e.tid === 4).args).toEqual({ sort_index: 4 });
    // lanes a trace does not use get no rows
    const small = toChromeTrace([header, { kind: "span", lane: "io", name: "read", t0: 0, t1: 1 }]).traceEvents;
    expect(small.filter((e) => e.name === "thread_name").map((e) => e.tid)).toEqual([4]);
  });

  it("turns spans into complete events with short names and their details", () => {
    expect(find((e) => e.name === "gate L3 c5")).toEqual({ ph: "X", pid: 1, tid: 3, name: "gate L3 c5", cat: "compute", ts: 10, dur: 25, args: { token: 0, layer: 3, cluster: 5, neurons: 12 } });
    expect(find((e) => e.name === "read L3 c5 gate")).toMatchObject({ ph: "X", tid: 4, ts: 0, dur: 20, args: { layer: 3, cluster: 5, bytes: 4096, reads: 2, phase: "gate" } });
    expect(find((e) => e.name === "predict L0")).toMatchObject({ ph: "X", tid: 2, ts: 55, dur: 15, cat: "predictor" });
    expect(find((e) => e.name === "plan")).toMatchObject({ ph: "X", tid: 1, ts: 0, dur: 100, args: {} });
  });

  it("puts tokens on the tokens lane and actor events as instants", () => {
    expect(find((e) => e.name === "token 0")).toMatchObject({ ph: "X", tid: 6, ts: 0, dur: 50, args: { index: 0, tokenId: 42 } });
    expect(find((e) => e.name === "token 1")).toMatchObject({ ph: "X", tid: 6, ts: 50, dur: 30 });
    expect(find((e) => e.name === "prefill" && e.tid === 6)).toMatchObject({ ph: "X", ts: 80, dur: 20 });
    expect(find((e) => e.ph === "i")).toEqual({
      ph: "i",
      s: "t",
      pid: 1,
      tid: 7,
      name: "NEXT → session",
      cat: "actors",
      ts: 5,
      args: { type: "@xstate.event", actor: "session", event: "NEXT", source: "cli" },
    });
  });
});

describe("traceSvg", () => {
  // width 1120 − 100 px of labels − 20 px margin = 1000 px for 100 µs: x = 100 + 10·t
  const two: TraceRecord[] = [header, { kind: "span", lane: "io", name: "read", t0: 40, t1: 100 }, { kind: "span", lane: "compute", name: "gate", t0: 10, t1: 30 }];
  const spanRects = (svg: string) => [...svg.matchAll(/<rect class="span" x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="(#[0-9a-f]{6})"/g)];

  it("places span rectangles at hand-computed pixels, one row per lane", () => {
    const svg = traceSvg(two, { fromUs: 0, toUs: 100, width: 1120 });
    const rects = spanRects(svg);
    expect(rects).toHaveLength(2);
    // rows in lane order (compute above io) from y = 70, 24 px each, spans inset 4 px
    expect(rects.map((m) => [m[1], m[2], m[3], m[4]])).toEqual([
      ["500", "98", "600", "16"], // read [40,100] on io (row 2)
      ["200", "74", "200", "16"], // gate [10,30] on compute (row 1)
    ]);
    expect(rects[0]![5]).not.toBe(rects[1]![5]); // coloured by name
    expect(svg).toMatch(/class="lane"[^>]*>compute<\/text>/);
    expect(svg).toMatch(/class="lane"[^>]*>io<\/text>/);
    expect(svg).not.toMatch(/>scheduler</);
    expect(svg).toMatch(/^<svg xmlns="http:\/\/www.w3.org\/2000\/svg" width="1120"/);
    // legend: one swatch per span name shown
    expect(svg.match(/<rect class="swatch"/g)).toHaveLength(2);
    expect(svg).toMatch(/>gate<\/text>/);
  });

  it("has a ms axis with 1/2/5 × 10^k ticks", () => {
    // 0.1 ms over 1000 px → aim for 10 ticks → 0.01 ms apart: 0.00, 0.01, …, 0.10
    const svg = traceSvg(two, { fromUs: 0, toUs: 100, width: 1120 });
    expect(svg.match(/class="grid"/g)).toHaveLength(11);
    expect(svg).toContain(`<line class="grid" x1="600" `);
    expect(svg).toMatch(/>0\.05<\/text>/);
    expect(svg).toMatch(/>0\.10<\/text>/);
    expect([0.013, 3, 7, 1, 0.26, 120].map(niceStep)).toEqual([0.02, 5, 10, 1, 0.5, 200]);
  });

  it("clips spans to the window, drops those outside, and keeps tiny ones visible", () => {
    // window [20,70] over 1000 px: x = 100 + 20·(t − 20)
    const svg = traceSvg([...two, { kind: "span", lane: "io", name: "read", t0: 0, t1: 5 }, { kind: "span", lane: "io", name: "read", t0: 50, t1: 50.001 }], {
      fromUs: 20,
      toUs: 70,
      width: 1120,
    });
    expect(spanRects(svg).map((m) => [m[1], m[3]])).toEqual([
      ["500", "600"], // read [40,100] → [40,70]
      ["100", "200"], // gate [10,30] → [20,30]
      ["700", "0.5"], // 1 ns span → 0.5 px
    ]);
  });

  it("marks token boundaries and defaults to the first 3 decode tokens", () => {
    const tokens: TraceRecord[] = [header, { kind: "span", lane: "compute", name: "ffn", t0: 0, t1: 400 }];
    for (let i = 0; i < 4; i++) tokens.push({ kind: "token", index: i, t0: i * 100, t1: i * 100 + 100 });
    const svg = traceSvg(tokens, { width: 1120 }); // window [0,300]: x = 100 + t·10/3
    expect(svg).toContain("tokens 0..2");
    expect(svg).toMatch(/>token 0<\/text>/);
    expect(svg).toMatch(/>token 2<\/text>/);
    expect(svg).not.toMatch(/>token 3</);
    // boundaries at 0, 100, 200, 300 µs
    expect([...svg.matchAll(/<line class="token" x1="([\d.]+)"/g)].map((m) => m[1])).toEqual(["100", "433.33", "766.67", "1100"]);
    expect(spanRects(svg).map((m) => [m[1], m[3]])).toEqual([["100", "1000"]]);
    const later = traceSvg(tokens, { width: 1120, tokens: [3, 3] });
    expect(later).toMatch(/>token 3<\/text>/);
    expect(later).not.toMatch(/>token 2</);
    expect(() => traceSvg(tokens, { tokens: [7, 9] })).toThrow(/no decode tokens in 7\.\.9: the trace has decode tokens 0\.\.3/);
  });

  it("escapes text, captions the hidden I/O share and is deterministic", () => {
    const svg = traceSvg(example, { title: `a <b> & "c"` });
    expect(svg).toContain("a &lt;b&gt; &amp; &quot;c&quot;");
    expect(svg).not.toContain("<b>");
    expect(svg).toContain("I/O hidden behind compute: 62.5%");
    expect(traceSvg(example, { title: `a <b> & "c"` })).toBe(svg);
    expect(traceSvg(structuredClone(example))).toBe(traceSvg(example));
  });
});

describe("neuronpipe trace", () => {
  async function run(...argv: string[]): Promise<string> {
    // values as parseArgs would give them
    const values: Record<string, string | boolean | undefined> = {};
    const positionals: string[] = [];
    for (let i = 0; i < argv.length; i++) {
      if (argv[i]!.startsWith("--")) values[argv[i]!.slice(2)] = argv[++i];
      else positionals.push(argv[i]!);
    }
    let out = "";
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((s: string) => ((out += s), true)) as typeof process.stdout.write;
    try {
      await traceCommand.run(values, positionals);
    } finally {
      process.stdout.write = write;
    }
    return out;
  }
  const trace = writeTemp("run.jsonl", toJsonl(example));

  it("declares its options for parseArgs", () => {
    expect(traceCommand.options.help).toEqual({ type: "boolean", short: "h" });
    for (const o of ["out", "tokens", "width"]) expect(traceCommand.options[o]?.type).toBe("string");
  });

  it("export writes TRACE.json next to the input and refuses to overwrite the input", async () => {
    const out = await run("export", trace);
    const json = join(dir, "run.json");
    expect(out).toContain(`wrote ${json} (26 events`);
    expect(JSON.parse(readFileSync(json, "utf8"))).toEqual(toChromeTrace(example));
    await expect(run("export", trace, "--out", trace)).rejects.toThrow(/is the input trace/);
  });

  it("plot writes an SVG of the chosen tokens", async () => {
    const svgPath = join(dir, "plot.svg");
    const out = await run("plot", trace, "--out", svgPath, "--tokens", "1..1", "--width", "800");
    expect(out).toContain(`wrote ${svgPath} (tokens 1..1`);
    const svg = readFileSync(svgPath, "utf8");
    expect(svg).toMatch(/^<svg [^>]*width="800"/);
    expect(svg).toContain("tokens 1..1");
  });

  it("stats prints the headline numbers", async () => {
    const out = await run("stats", trace);
    expect(out).toMatch(/I\/O time\s+0\.040 ms/);
    expect(out).toMatch(/compute time\s+0\.050 ms/);
    expect(out).toMatch(/I\/O hidden\s+62\.5%/);
    expect(out).toMatch(/orchestration\s+31\.3%/);
    expect(out).toMatch(/mean 0\.040 ms, P50 0\.030 ms, P90 0\.050 ms, P99 0\.050 ms/);
  });

  it("fails clearly on a missing subcommand or file, or a bad --tokens", async () => {
    await expect(run()).rejects.toThrow(/needs a subcommand: export, plot, stats/);
    await expect(run("draw", trace)).rejects.toThrow(/unknown trace subcommand "draw"/);
    await expect(run("plot")).rejects.toThrow(/needs a trace file/);
    await expect(run("stats", join(dir, "nope.jsonl"))).rejects.toThrow(/nope\.jsonl does not exist/);
    await expect(run("plot", trace, "--tokens", "3-5")).rejects.toThrow(/--tokens must be a decode-token range A\.\.B/);
    await expect(run("plot", trace, "--tokens", "5..3")).rejects.toThrow(/ends before it starts/);
    await expect(run("stats", trace, "--out", "x")).rejects.toThrow(/--out does not apply to trace stats/);
    expect(existsSync(join(dir, "x"))).toBe(false);
  });
});

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
