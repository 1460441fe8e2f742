// GGUF reader and writer against a file assembled byte by byte here, following the format
// description (ggml docs/gguf.md), not our writer — and every malformed case named.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GGUFError, readGGUF } from "../../src/gguf/reader.js";
import { ValueType } from "../../src/gguf/types.js";
import { GGUFWriter } from "../../src/gguf/writer.js";

const dir = mkdtempSync(join(tmpdir(), "np-gguf-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// --- a tiny byte builder (little-endian) ---
const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const u64 = (v: number) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(v));
  return b;
};
const str = (s: string) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
const f32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeFloatLE(v);
  return b;
};

/** GGUF v3 with 3 keys and 2 tensors (f32 [4] and f16 [2, 3]), alignment 32. */
function handMade(magic = "GGUF"): Buffer {
  const head = Buffer.concat([
    Buffer.from(magic),
    u32(3),
    u64(2), // tensors
    u64(3), // kv
    str("general.architecture"),
    u32(ValueType.STRING),
    str("llama"),
    str("test.f32"),
    u32(ValueType.FLOAT32),
    f32(1.5),
    str("test.arr"),
    u32(ValueType.ARRAY),
    u32(ValueType.INT32),
    u64(3),
    u32(7),
    u32(0xffffffff), // -1 as i32
    u32(9),
    // tensor infos
    str("a"),
    u32(1),
    u64(4),
    u32(0), // F32
    u64(0),
    str("b"),
    u32(2),
    u64(2),
    u64(3),
    u32(1), // F16
    u64(32), // 16 bytes of a, padded to 32
  ]);
  const pad = Buffer.alloc((32 - (head.length % 32)) % 32);
  const a = Buffer.concat([f32(1), f32(2), f32(3), f32(4), Buffer.alloc(16)]);
  const b = Buffer.alloc(12);
  for (let i = 0; i < 6; i++) b.writeUInt16LE(0x3c00 + i, i * 2); // f16 values
  return Buffer.concat([head, pad, a, b]);
}

function write(name: string, data: Buffer): string {
  const p = join(dir, name);
  writeFileSync(p, data);
  return p;
}

describe("GGUF reader", () => {
  it("reads a hand-assembled v3 file", () => {
    const bytes = handMade();
    const f = readGGUF(write("ok.gguf", bytes));
    expect(f.magic).toBe("GGUF");
    expect(f.version).toBe(3);
    expect(f.metadata.get("general.architecture")?.value).toBe("llama");
    expect(f.metadata.get("test.f32")?.value).toBe(1.5);
    expect(Array.from(f.metadata.get("test.arr")?.value as Int32Array)).toEqual([7, -1, 9]);
    expect(f.tensors.map((t) => [t.name, t.ne, t.type, t.nbytes])).toEqual([
      ["a", [4], 0, 16],
      ["b", [2, 3], 1, 12],
    ]);
    // data offset: aligned end of header; tensor b at +32
    const a = f.tensorsByName.get("a")!;
    expect(a.offset % 32).toBe(0);
    expect(bytes.readFloatLE(a.offset + 8)).toBe(3);
    expect(bytes.readUInt16LE(f.tensorsByName.get("b")!.offset)).toBe(0x3c00);
  });

  it("accepts PowerInfer's PWRI magic", () => {
    expect(readGGUF(write("pwri.gguf", handMade("PWRI"))).magic).toBe("PWRI");
  });

  const cases: [string, (b: Buffer) => Buffer, RegExp][] = [
    ["bad magic", (b) => Buffer.concat([Buffer.from("GGUX"), b.subarray(4)]), /bad magic "GGUX"/],
    ["version 1", (b) => (b.writeUInt32LE(1, 4), b), /version 1 is not supported/],
    ["version 9", (b) => (b.writeUInt32LE(9, 4), b), /unsupported GGUF version 9/],
    ["truncated header", (b) => b.subarray(0, 60), /truncated file/],
    ["truncated data", (b) => b.subarray(0, b.length - 4), /tensor b .* lies outside the file/],
    ["absurd tensor count", (b) => (b.writeBigUInt64LE(1n << 40n, 8), b), /tensor count is 1099511627776/],
    ["absurd string length", (b) => (b.writeBigUInt64LE(1n << 50n, 24), b), /length of metadata key #0 is/],
  ];
  for (const [name, mutate, msg] of cases) {
    it(`rejects ${name} with a clear error`, () => {
      const p = write(`${name.replace(/ /g, "_")}.gguf`, mutate(handMade()));
      expect(() => readGGUF(p)).toThrow(GGUFError);
      expect(() => readGGUF(p)).toThrow(msg);
      expect(() => readGGUF(p)).toThrow(p);
    });
  }

  it("rejects an unknown tensor type and an absurd dimension, naming the tensor and offset", () => {
    const b = handMade();
    const typeAt = b.indexOf(Buffer.concat([str("a"), u32(1), u64(4)])) + 8 + 1 + 4 + 8;
    const bad = Buffer.from(b);
    bad.writeUInt32LE(77, typeAt);
    expect(() => readGGUF(write("type.gguf", bad))).toThrow(/tensor a: unknown tensor type 77 \(at byte \d+\)/);
    const dimAt = typeAt - 8;
    const bad2 = Buffer.from(b);
    bad2.writeBigUInt64LE(1n << 62n, dimAt);
    expect(() => readGGUF(write("dim.gguf", bad2))).toThrow(/dimension 0 of a is \d+, more than the limit/);
  });

  it("names a missing file", () => {
    expect(() => readGGUF(join(dir, "nope.gguf"))).toThrow(/nope\.gguf: cannot open/);
  });
});

describe("GGUF writer", () => {
  it("writes the same bytes as the hand-assembled file", async () => {
    const ref = handMade();
    const w = new GGUFWriter();
    w.setString("general.architecture", "llama");
    w.setF32("test.f32", 1.5);
    w.setArray("test.arr", ValueType.INT32, new Int32Array([7, -1, 9]));
    const a = new Float32Array([1, 2, 3, 4]);
    const bvals = new Uint16Array(6).map((_, i) => 0x3c00 + i);
    w.addTensor({ name: "a", ne: [4], type: 0, data: () => new Uint8Array(a.buffer) });
    w.addTensor({ name: "b", ne: [2, 3], type: 1, data: () => new Uint8Array(bvals.buffer) });
    const p = join(dir, "written.gguf");
    await w.write(p);
    // the writer pads the last tensor to the alignment too; the hand-made file does not
    const got = readFileSync(p);
    expect(got.subarray(0, ref.length).equals(ref)).toBe(true);
    expect(got.length).toBe(Math.ceil(ref.length / 32) * 32);
  });

  it("round-trips every metadata type", async () => {
    const w = new GGUFWriter();
    w.set("u8", ValueType.UINT8, 200).set("i8", ValueType.INT8, -100).set("u16", ValueType.UINT16, 60000);
    w.set("i16", ValueType.INT16, -30000).set("u32", ValueType.UINT32, 4e9).set("i32", ValueType.INT32, -2e9);
    w.set("f32", ValueType.FLOAT32, 0.25).set("bool", ValueType.BOOL, true).set("s", ValueType.STRING, "héllo ✓");
    w.set("u64", ValueType.UINT64, 1n << 60n).set("i64", ValueType.INT64, -(1n << 60n)).set("f64", ValueType.FLOAT64, Math.PI);
    w.setArray("strs", ValueType.STRING, ["a", "", "日本"]);
    w.setArray("f32s", ValueType.FLOAT32, new Float32Array([1, -2.5]));
    w.setArray("bools", ValueType.BOOL, [true, false]);
    const p = join(dir, "types.gguf");
    await w.write(p);
    const f = readGGUF(p);
    const v = (k: string) => f.metadata.get(k)?.value;
    expect([v("u8"), v("i8"), v("u16"), v("i16"), v("u32"), v("i32"), v("f32"), v("bool"), v("s")]).toEqual([
      200, -100, 60000, -30000, 4e9, -2e9, 0.25, true, "héllo ✓",
    ]);
    expect([v("u64"), v("i64"), v("f64")]).toEqual([1n << 60n, -(1n << 60n), Math.PI]);
    expect(v("strs")).toEqual(["a", "", "日本"]);
    expect(Array.from(v("f32s") as Float32Array)).toEqual([1, -2.5]);
    expect(v("bools")).toEqual([true, false]);
  });

  it("never leaves a partial file when a tensor fails", async () => {
    const w = new GGUFWriter();
    w.addTensor({ name: "x", ne: [4], type: 0, data: () => new Uint8Array(3) });
    const p = join(dir, "partial.gguf");
    await expect(w.write(p)).rejects.toThrow(/tensor x produced 3 bytes, expected 16/);
    expect(() => readFileSync(p)).toThrow();
  });
});

describe("model config refusals", () => {
  it("names unsupported rope scaling, MoE and architectures", async () => {
    const { readConfig } = await import("../../src/model/config.js");
    const base = () => {
      const w = new GGUFWriter();
      w.setString("general.architecture", "llama");
      w.setU32("llama.embedding_length", 64).setU32("llama.block_count", 1).setU32("llama.feed_forward_length", 128);
      w.setU32("llama.attention.head_count", 4);
      w.setArray("tokenizer.ggml.tokens", ValueType.STRING, ["a", "b"]);
      return w;
    };
    const write = async (w: GGUFWriter, name: string) => {
      const p = join(dir, name);
      await w.write(p);
      return readGGUF(p);
    };
    expect(readConfig(await write(base(), "ok-config.gguf")).activation).toBe("swiglu");
    const scaled = base().setString("llama.rope.scaling.type", "yarn");
    await expect(write(scaled, "yarn.gguf").then(readConfig)).rejects.toThrow(/rope scaling \(yarn\) is not supported/);
    const moe = base().setU32("llama.expert_count", 8);
    await expect(write(moe, "moe.gguf").then(readConfig)).rejects.toThrow(/mixture-of-experts .* = 8\) are not supported/);
    const gpt = base().setString("general.architecture", "gpt2");
    await expect(write(gpt, "gpt2.gguf").then(readConfig)).rejects.toThrow(/unsupported architecture "gpt2"/);
    const act = base().setString("neuronpipe.ffn_activation", "gelu");
    await expect(write(act, "gelu.gguf").then(readConfig)).rejects.toThrow(/neuronpipe.ffn_activation = "gelu" is not one of/);
  });
});
