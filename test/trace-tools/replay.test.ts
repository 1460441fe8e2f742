// Replay (src/trace-tools/replay.ts) against the recordings it replays: a generation on the
// pipeline decoder is traced to a file, read back, and replayed with no model and no worker —
// the machines must go through exactly the recorded states; a run that failed (an I/O error
// injected by truncating the pack under it) must replay to `failed` with the recorded cause;
// --until stops at the token and layer asked; the CLI says so.
import { copyFileSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { loadSparseModel } from "../../src/api/model.js";
import { main } from "../../src/cli/main.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { readTrace } from "../../src/trace/read.js";
import { TraceRecorder, type ActorRecord } from "../../src/trace/recorder.js";
import { byActor, replayTrace, type ReplayState } from "../../src/trace-tools/replay.js";
import { scratchDefaultPack } from "../helpers/default-pack.js";

/** Each actor's states as text, actor by actor (the order within an actor is the machine's). */
const sequences = (l: ReplayState[]) => Object.fromEntries([...byActor(l)].map(([a, s]) => [a, s.map((x) => `${x.state} ${x.status}`)]));

const { dir, packPath } = scratchDefaultPack("np-replay-");
const ctx = 128;

/** Generate `tokens` greedy tokens with the cluster pipeline (gate rows read: every kind of event), traced to a file. */
async function record(path: string, tracePath: string, tokens: number, onToken?: (i: number) => void): Promise<{ error?: string }> {
  const pack = openPack(path);
  const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: ctx, predictor: true }));
  const m = await loadSparseModel(path, { memory, decoder: "pipeline", pinGates: false, pipeline: { clusterNeurons: 128 }, contextSize: ctx });
  const s = m.createSession();
  let error: string | undefined;
  let n = 0;
  try {
    for await (const _ of s.generate("The whale", { maxTokens: tokens, temperature: 0, trace: tracePath })) onToken?.(++n);
  } catch (e) {
    error = (e as Error).message;
  } finally {
    s.dispose();
    await m[Symbol.asyncDispose]();
  }
  return { error };
}

describe("trace replay", () => {
  const tracePath = join(dir, "run.jsonl");
  beforeAll(async () => {
    expect((await record(packPath, tracePath, 6)).error).toBeUndefined();
  }, 120_000);

  it("replays a recorded pipeline run to the identical state sequence, with no model and no worker", async () => {
    const records = readTrace(tracePath);
    const r = await replayTrace(records);
    expect(r.recorded.length).toBeGreaterThan(100); // session, pipeline, compute, I/O loader, prefill, every token machine
    expect(new Set(r.recorded.map((s) => s.actor))).toEqual(new Set(["pipeline", "session", "compute:big", "io-loader", "prefill", "token"]));
    expect(r.firstDifference).toBeUndefined();
    expect(sequences(r.states)).toEqual(sequences(r.recorded));
    expect(r.session?.state).toBe("done");
    expect(r.delivered).toBeGreaterThan(100);
  });

  it("--until token:N/layer:L stops there, on a prefix of the recorded states", async () => {
    const r = await replayTrace(readTrace(tracePath), { until: { token: 2, layer: 3 } });
    expect(r.stoppedAt).toBeDefined();
    const last = [...r.states].reverse().find((s) => s.actor === "token")!;
    expect(last.context?.step).toBe(2);
    expect(last.context?.layer).toBe(3);
    const mine = sequences(r.states);
    const theirs = sequences(r.recorded);
    for (const [actor, seq] of Object.entries(mine)) expect(seq, actor).toEqual(theirs[actor]!.slice(0, seq.length));
    expect(r.states.length).toBeLessThan(r.recorded.length);
  });

  it("`neuronpipe trace replay` says the states are identical", async () => {
    let out = "";
    const w = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((s: string) => ((out += s), true)) as typeof process.stdout.write;
    try {
      expect(await main(["trace", "replay", tracePath])).toBe(0);
    } finally {
      process.stdout.write = w;
    }
    expect(out).toMatch(/replayed \d+ events into the machines/);
    expect(out).toMatch(/states: (\d+) replayed, \1 recorded — every actor's identical/);
    expect(out).toMatch(/session: session done/);
  });
});

it("a run that failed (I/O error) replays to failed with the same cause", async () => {
  const copy = join(dir, "copy.pack.gguf");
  copyFileSync(packPath, copy);
  const pack = openPack(copy);
  const tracePath = join(dir, "failed.jsonl");
  const r = await record(copy, tracePath, 64, (i) => (i === 4 ? truncateSync(copy, pack.layers[1]!.bundlesOffset) : undefined));
  expect(r.error).toMatch(/I\/O loader .*copy\.pack\.gguf.*offset \d+/);
  const records = readTrace(tracePath);
  const recordedEnd = records.filter((x): x is ActorRecord => x.kind === "actor" && x.type === "@xstate.snapshot" && x.actor === "session").pop()!;
  expect(recordedEnd.state).toBe("failed");
  const replay = await replayTrace(records);
  expect(replay.firstDifference).toBeUndefined();
  expect(replay.session?.state).toBe("failed");
  expect(replay.session?.context?.error).toBe(recordedEnd.context?.error);
  expect(`generation failed: ${replay.session?.context?.error}`).toBe(r.error);
}, 120_000);
