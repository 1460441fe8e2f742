// Bad metadata is refused at load naming the file and the key; bad weights stop generation naming
// the first layer whose output is not finite; messages quoting the file's bytes stay short and
// printable. Each case is a regression test for a defect the issue-17 fuzz found.
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadModel, readGGUF, synthModel } from "../../src/index.js";
import { ValueType } from "../../src/gguf/types.js";
import type { GGUFWriter } from "../../src/gguf/writer.js";

const dir = mkdtempSync(join(tmpdir(), "np-harden-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const shape = { embd: 64, ff: 96, layers: 2, heads: 2, kvHeads: 2, ctx: 64 };
let n = 0;

async function model(edit: (w: GGUFWriter) => void, type = "f32"): Promise<string> {
  const w = synthModel({ shape, type, seed: 1 });
  edit(w);
  const p = join(dir, `m${n++}.gguf`);
  await w.write(p);
  return p;
}

async function generate(path: string): Promise<string> {
  const m = await loadModel(path);
  try {
    const s = m.createSession({ contextSize: 64 });
    let text = "";
    for await (const p of s.generate("Hello", { maxTokens: 3, temperature: 0 })) text += p.text;
    return text;
  } finally {
    m.dispose();
  }
}

describe("metadata a kernel relies on is checked at load", () => {
  const cases: [string, (w: GGUFWriter) => void, RegExp][] = [
    ["rms epsilon NaN", (w) => w.setF32("llama.attention.layer_norm_rms_epsilon", NaN), /metadata llama\.attention\.layer_norm_rms_epsilon = NaN is not a number above 0/],
    ["rope base 0", (w) => w.setF32("llama.rope.freq_base", 0), /metadata llama\.rope\.freq_base = 0 is not a number above 0/],
    ["odd rope dimension", (w) => w.setU32("llama.rope.dimension_count", 31), /metadata llama\.rope\.dimension_count = 31 is odd/],
    ["rope dimension above the head's", (w) => w.setU32("llama.rope.dimension_count", 64), /llama\.rope\.dimension_count = 64 is not a whole number from 0 to 32/],
    ["a float token id", (w) => w.setF32("tokenizer.ggml.bos_token_id", 1.5), /tokenizer\.ggml\.bos_token_id = 1\.5 is not a token id/],
    ["a token id past the vocabulary", (w) => w.setU32("tokenizer.ggml.eos_token_id", 40000), /tokenizer\.ggml\.eos_token_id = 40000 is not a token id \(0 to 31999\)/],
    ["zero layers", (w) => w.setU32("llama.block_count", 0), /metadata llama\.block_count = 0 is not a whole number from 1/],
    ["a fractional head count", (w) => w.setF32("llama.attention.head_count", 2.5), /llama\.attention\.head_count = 2\.5 is not a whole number/],
    ["more kv heads than heads", (w) => w.setU32("llama.attention.head_count_kv", 4), /llama\.attention\.head_count_kv = 4 is not a whole number from 1 to 2/],
    ["context length 0", (w) => w.setU32("llama.context_length", 0), /llama\.context_length = 0 is not a whole number/],
  ];
  for (const [name, edit, message] of cases) {
    it(name, async () => {
      const p = await model(edit);
      const e = await loadModel(p).then(
        (m) => (m.dispose(), undefined),
        (err: Error) => err,
      );
      expect(e?.message).toMatch(message);
      expect(e?.message.startsWith(p)).toBe(true);
    });
  }

  it("a NaN vocabulary score", async () => {
    const p = await model((w) => {
      const scores = Float32Array.from(w.metadata.get("tokenizer.ggml.scores")!.value as Float32Array);
      scores[7] = NaN;
      w.setArray("tokenizer.ggml.scores", ValueType.FLOAT32, scores);
    });
    await expect(loadModel(p)).rejects.toThrow(/tokenizer\.ggml\.scores\[7\] is NaN, not a finite number/);
  });
});

describe("weights that are not finite stop generation naming the layer", () => {
  it("NaN in blk.1.ffn_down.weight: an error naming layer 1, no tokens sampled from NaN", async () => {
    const p = await model(() => {});
    const t = readGGUF(p).tensorsByName.get("blk.1.ffn_down.weight")!;
    const fd = openSync(p, "r+");
    writeSync(fd, Buffer.from(new Float32Array(64).fill(NaN).buffer), 0, 256, t.offset);
    closeSync(fd);
    await expect(generate(p)).rejects.toThrow(/non-finite logits at position \d+: the output of layer 1 \(blk\.1\.\*\) is the first that is not finite/);
  });

  it("Inf in output.weight: an error naming the output", async () => {
    const p = await model(() => {});
    const t = readGGUF(p).tensorsByName.get("output.weight")!;
    const fd = openSync(p, "r+");
    writeSync(fd, Buffer.from(new Float32Array(64).fill(Infinity).buffer), 0, 256, t.offset);
    closeSync(fd);
    await expect(generate(p)).rejects.toThrow(/every layer's output is finite: the output norm or output\.weight is not/);
  });
});

describe("messages that quote the file", () => {
  it("a key with control characters and 60,000 bytes, of an unknown type: one short, printable line", async () => {
    const key = `bad\u0001key\u001b[31m${"x".repeat(60_000)}`;
    const p = await model((w) => w.set(key, ValueType.UINT8, 1));
    const bytes = readFileSync(p);
    const at = bytes.indexOf(Buffer.from(key)) + Buffer.byteLength(key);
    bytes.writeUInt32LE(99, at); // the value type after the key
    writeFileSync(p, bytes);
    const e = (await loadModel(p).catch((err: Error) => err)) as Error;
    expect(e).toBeInstanceOf(Error);
    expect(e.message).toMatch(/unknown metadata value type 99/);
    expect(e.message).toMatch(/bad\\x01key\\x1b\[31mxxx/);
    expect(e.message).toMatch(/\(at byte \d+\)$/);
    expect(e.message.length).toBeLessThanOrEqual(500);
    // eslint-disable-next-line no-control-regex
    expect(e.message).not.toMatch(/[\u0000-\u001f\u007f]/);
  });

  // The 36 MB message: a key whose length field claims more than the file holds was read
  // and quoted whole. Now the length is checked against its limit before any byte is read.
  it("a key whose length field claims 36,000,000 bytes: refused naming the key's index and the limit", async () => {
    const p = await model(() => {});
    const bytes = readFileSync(p);
    const key = "llama.context_length";
    const at = bytes.indexOf(Buffer.from(key)) - 8; // the u64 length before the key's bytes
    expect(Number(bytes.readBigUInt64LE(at))).toBe(key.length);
    bytes.writeBigUInt64LE(36_000_000n, at);
    writeFileSync(p, bytes);
    const e = (await loadModel(p).catch((err: Error) => err)) as Error;
    expect(e.message).toMatch(/length of metadata key #\d+ is 36000000, more than the limit 65535 \(at byte \d+\)$/);
    expect(e.message.startsWith(p)).toBe(true);
    expect(e.message.length).toBeLessThanOrEqual(500);
  });

  it("a tensor name longer than ggml's 63 bytes: refused naming the tensor's index and the limit", async () => {
    const p = await model(() => {});
    const bytes = readFileSync(p);
    const name = readGGUF(p).tensors[1]!.name;
    // the tensor directory: u64 length, then the name (the first occurrence past the metadata)
    const at = bytes.indexOf(Buffer.from(name), 0) - 8;
    expect(Number(bytes.readBigUInt64LE(at))).toBe(name.length);
    bytes.writeBigUInt64LE(64n, at);
    writeFileSync(p, bytes);
    await expect(loadModel(p)).rejects.toThrow(/length of name of tensor #1 is 64, more than the limit 63 \(at byte \d+\)$/);
  });
});

describe("more regressions from the issue-17 report", () => {
  it("a tensor whose data offset is not aligned is refused naming the tensor and the offset", async () => {
    const p = await model(() => {});
    const f = readGGUF(p);
    const t = f.tensors[1]!;
    // the tensor directory entry ends with the u64 relative offset: find it after the name
    const bytes = readFileSync(p);
    const at = bytes.indexOf(Buffer.from(t.name), 0) + Buffer.byteLength(t.name) + 4 + 8 * t.ne.length + 4;
    expect(Number(bytes.readBigUInt64LE(at))).toBe(t.relOffset);
    bytes.writeBigUInt64LE(BigInt(t.relOffset + 4), at);
    writeFileSync(p, bytes);
    await expect(loadModel(p)).rejects.toThrow(new RegExp(`tensor ${t.name.replace(/\./g, "\\.")}: data offset ${t.relOffset + 4} not aligned to 32`));
  });

  it("a pack that is missing or truncated is reported as such, not as a plain model", async () => {
    await expect(loadModel(join(dir, "none.pack.gguf"), { memory: "20MiB" })).rejects.toThrow(/none\.pack\.gguf: cannot open: ENOENT/);
    const src = await model(() => {});
    const cut = join(dir, "cut.pack.gguf");
    writeFileSync(cut, readFileSync(src).subarray(0, 200_000));
    const e = (await loadModel(cut, { memory: "20MiB" }).catch((err: Error) => err)) as Error;
    expect(e.message).toMatch(/cut\.pack\.gguf: .*(lies outside the file|truncated)/);
    expect(e.message).not.toMatch(/plain model/);
  });

  it("evaluate(), reset() and a second generate() during a generation fail with a clear message and leave it intact", async () => {
    const p = await model(() => {});
    const m = await loadModel(p);
    const s = m.createSession({ contextSize: 64 });
    const ref = m.createSession({ contextSize: 64 });
    const ids: number[] = [];
    for await (const x of ref.generate("Hello", { maxTokens: 6, temperature: 0 })) ids.push(x.token);
    ref.dispose();
    const got: number[] = [];
    for await (const x of s.generate("Hello", { maxTokens: 6, temperature: 0 })) {
      got.push(x.token);
      if (got.length === 2) {
        expect(() => s.evaluate([1, 2])).toThrow(/session is generating: evaluate\(\) would corrupt it/);
        expect(() => s.reset()).toThrow(/session is generating: changing its context would corrupt it/);
        await expect(s.generate("x").next()).rejects.toThrow(/session is already generating/);
      }
    }
    expect(got).toEqual(ids);
    m.dispose();
  });

  it("--trace to a path that cannot be written fails before generating, naming the path", async () => {
    const { runCli } = await import("../helpers/cli.js");
    const r = await runCli(["generate", "-m", await model(() => {}), "-p", "Hi", "-n", "4", "--trace", join(dir, "no", "such", "dir", "t.jsonl")]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/no\/such\/dir\/t\.jsonl/);
    expect(r.out).toBe(""); // nothing generated
  });
});
