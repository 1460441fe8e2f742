// The mutation fuzzer: a bounded smoke run (the long run is tools/fuzz.mjs) must find no defect;
// its field walker agrees with the reader; its judge calls internal errors and long or
// control-character messages defects.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readGGUF } from "../../src/gguf/reader.js";
import { judgeError } from "../../src/tools/fuzz/check.js";
import { layoutOf } from "../../src/tools/fuzz/fields.js";
import { mutate } from "../../src/tools/fuzz/mutate.js";
import { fuzz, type FuzzSeed } from "../../src/tools/fuzz/run.js";
import { modelSeeds, packSeed } from "../../src/tools/fuzz/seeds.js";

const dir = mkdtempSync(join(tmpdir(), "np-fuzz-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let models: FuzzSeed[];
let pack: FuzzSeed;
beforeAll(async () => {
  models = await modelSeeds(dir);
  pack = await packSeed(dir);
}, 120_000);

describe("fuzzer", () => {
  it("its field walker finds the tensors where the reader does", () => {
    for (const s of [...models, pack]) {
      const f = readGGUF(s.path);
      const l = layoutOf(readFileSync(s.path));
      expect(l.dataOffset).toBe(f.dataOffset);
      expect(l.tensors.map((t) => [t.name, t.offset, t.nbytes])).toEqual(f.tensors.map((t) => [t.name, t.offset, t.nbytes]));
      expect(l.fields.filter((x) => x.kind === "key").map((x) => readFileSync(s.path).toString("utf8", x.offset, x.offset + x.size))).toEqual([...f.metadata.keys()]);
    }
  });

  it("mutant k is the same bytes every time, and mutants differ", () => {
    const b = readFileSync(models[0]!.path);
    const l = layoutOf(b);
    expect(mutate(b, l, 41).bytes.equals(mutate(b, l, 41).bytes)).toBe(true);
    expect(mutate(b, l, 41).bytes.equals(mutate(b, l, 42).bytes)).toBe(false);
  });

  it("its judge: a refusal is fine; a TypeError, a 600-character or a control-character message is a defect", () => {
    expect(judgeError(new Error("m.gguf: missing metadata key llama.block_count")).result).toBe("refused");
    expect(judgeError(new TypeError("Cannot read properties of undefined (reading 'ne')"))).toMatchObject({ result: "defect", defect: "internal-error" });
    expect(judgeError(new Error("x".repeat(600)))).toMatchObject({ result: "defect", defect: "long-message" });
    expect(judgeError(new Error("bad key \u0001"))).toMatchObject({ result: "defect", defect: "control-characters" });
    // a message is one line: a tab or a newline quoted from the file is a defect too
    expect(judgeError(new Error("bad key a\nb"))).toMatchObject({ result: "defect", defect: "control-characters" });
    expect(judgeError(new Error("bad key a\tb"))).toMatchObject({ result: "defect", defect: "control-characters" });
  });

  it("a bounded run: 4 model seeds × 150 and the pack × 100 mutants, no crash, hang, non-finite logits or bad message", async () => {
    const m = await fuzz({ seeds: models, count: 150, workers: 2, dir: join(dir, "run"), timeoutMs: 30_000 });
    const p = await fuzz({ seeds: [pack], count: 100, workers: 2, dir: join(dir, "run"), timeoutMs: 30_000 });
    for (const r of [m, p]) {
      expect(r.defects.map((d) => `${d.defect}: ${d.seed} #${d.mutant} (${d.what}): ${d.message}`)).toEqual([]);
      expect(r.longestMessage).toBeLessThanOrEqual(500);
      // both paths are exercised: mutants refused with a message, and mutants that load and run
      expect(r.refused).toBeGreaterThan(0);
      expect(r.ok).toBeGreaterThan(0);
    }
    expect(m.mutants).toBe(600);
    expect(p.mutants).toBe(100);
  }, 300_000);
});
