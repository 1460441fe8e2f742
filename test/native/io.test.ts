// Direct-I/O loader (native/src/io): both backends, O_DIRECT on/off, several queue depths,
// checked byte for byte against fs.readFileSync (independent reference).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeSync, existsSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { GGMLType, native } from "../../src/native.js";

const N = native();
const MiB = 1 << 20;
const BLK = 4096;

let dir = "";
let file = "";
let ref: Buffer;

/** Deterministic content: xorshift32 words. */
function content(bytes: number, seed: number): Buffer {
  const b = Buffer.alloc(bytes);
  const w = new Uint32Array(b.buffer, b.byteOffset, bytes >>> 2);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < w.length; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    w[i] = x;
  }
  return b;
}

function writeFile(path: string, data: Buffer): void {
  const fd = openSync(path, "w");
  let off = 0;
  while (off < data.length) off += writeSync(fd, data, off, Math.min(64 * MiB, data.length - off), off);
  fsyncSync(fd);
  closeSync(fd);
}

/** Deterministic pseudo-random block indices. */
function blocks(n: number, nBlocks: number, seed: number): number[] {
  let s = seed >>> 0;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(s % nBlocks);
  }
  return out;
}

const uringOk = (() => {
  if (!N.buildInfo().liburing) return false;
  const d = mkdtempSync(join(tmpdir(), "np-io-probe-"));
  try {
    const p = join(d, "probe");
    writeFile(p, Buffer.alloc(BLK));
    const id = N.openLoader(p, { backend: "uring", queueDepth: 1, directIO: false });
    N.closeLoader(id);
    return true;
  } catch {
    return false;
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
})();
const backends: ("uring" | "pread")[] = uringOk ? ["uring", "pread"] : ["pread"];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "np-io-"));
  file = join(dir, "data.bin");
  ref = content(8 * MiB, 12345);
  writeFile(file, ref);
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Reads `idx` blocks (1–3 blocks long) into a fresh buffer, packed; returns the buffer bytes. */
function readBlocks(loader: number, idx: number[], lens: number[]): { got: Buffer; want: Buffer } {
  const total = lens.reduce((a, b) => a + b, 0) * BLK;
  const buf = N.alloc(total);
  const req = new Float64Array(idx.length * 4);
  const want = Buffer.alloc(total);
  let dst = 0;
  for (let i = 0; i < idx.length; i++) {
    const off = idx[i] * BLK;
    const len = lens[i] * BLK;
    req.set([off, len, buf, dst], i * 4);
    ref.copy(want, dst, off, off + len);
    dst += len;
  }
  expect(N.readBatch(loader, req)).toBe(total);
  const got = Buffer.from(N.viewU8(buf, 0, total));
  N.free(buf);
  return { got, want };
}

describe("direct-I/O loader", () => {
  it("reports the chosen backend", () => {
    const id = N.openLoader(file, { backend: "auto", queueDepth: 8, directIO: true });
    const info = N.loaderInfo(id);
    expect(info.backend).toBe(uringOk ? "uring" : "pread");
    expect(info.queueDepth).toBe(8);
    expect(info.directIO).toBe(true);
    expect(info.fileSize).toBe(8 * MiB);
    N.closeLoader(id);
    expect(() => N.loaderInfo(id)).toThrow(/loaderInfo: loader \d+ is not an open loader/);
    const p = N.openLoader(file, { backend: "pread", queueDepth: 4, directIO: false, threads: 2 });
    expect(N.loaderInfo(p)).toMatchObject({ backend: "pread", threads: 2, directIO: false });
    N.closeLoader(p);
  });

  for (const backend of backends)
    for (const directIO of [true, false])
      for (const queueDepth of [1, 8, 32])
        it(`${backend} directIO=${directIO} depth ${queueDepth}: random blocks match readFileSync`, () => {
          const id = N.openLoader(file, { backend, queueDepth, directIO });
          expect(N.loaderInfo(id).backend).toBe(backend);
          const nBlocks = (8 * MiB) / BLK;
          const idx = blocks(300, nBlocks - 3, queueDepth * 7 + (directIO ? 1 : 0));
          const lens = blocks(300, 3, queueDepth + 99).map((x) => x + 1);
          idx.push(0, nBlocks - 1); // first and last block
          lens.push(1, 1);
          const { got, want } = readBlocks(id, idx, lens);
          expect(got.equals(want)).toBe(true);
          N.closeLoader(id);
        });

  it("both backends give identical bytes", () => {
    const idx = blocks(500, (8 * MiB) / BLK, 777);
    const lens = idx.map(() => 1);
    const results = backends.map((backend) => {
      const id = N.openLoader(file, { backend, queueDepth: 16, directIO: true });
      const r = readBlocks(id, idx, lens);
      N.closeLoader(id);
      return r;
    });
    for (const r of results) expect(r.got.equals(r.want)).toBe(true);
    if (results.length === 2) expect(results[0].got.equals(results[1].got)).toBe(true);
  });

  it("reads into a registered (fixed) buffer return the file's bytes, beside reads into another; freeing it while registered leaves the loader working; the pread backend says why it has none", () => {
    for (const backend of backends) {
      const id = N.openLoader(file, { backend, queueDepth: 8, directIO: true });
      const fixed = N.alloc(16 * BLK);
      const other = N.alloc(4 * BLK);
      const why = N.loaderFixBuffer(id, fixed);
      if (backend === "pread") expect(why).toBe("the pread backend has no fixed buffers");
      else {
        expect(why).toBe("");
        expect(N.loaderInfo(id).fixedBuffer).toBe(true);
      }
      // 16 blocks into the registered buffer (READ_FIXED), 4 into another (plain reads), one batch
      const reqs: number[] = [];
      for (let i = 0; i < 16; i++) reqs.push(((i * 37) % 2000) * BLK, BLK, fixed, (15 - i) * BLK);
      for (let i = 0; i < 4; i++) reqs.push(((i * 53 + 7) % 2000) * BLK, BLK, other, i * BLK);
      N.readBatch(id, Float64Array.from(reqs));
      const f = N.viewU8(fixed, 0, 16 * BLK);
      for (let i = 0; i < 16; i++) {
        const off = ((i * 37) % 2000) * BLK;
        expect(Buffer.from(f.subarray((15 - i) * BLK, (16 - i) * BLK)).equals(ref.subarray(off, off + BLK)), `block ${i}`).toBe(true);
      }
      const o = N.viewU8(other, 0, 4 * BLK);
      for (let i = 0; i < 4; i++) {
        const off = ((i * 53 + 7) % 2000) * BLK;
        expect(Buffer.from(o.subarray(i * BLK, (i + 1) * BLK)).equals(ref.subarray(off, off + BLK))).toBe(true);
      }
      // freed by its owner while registered: the loader holds its own reference
      N.free(fixed);
      N.readBatch(id, new Float64Array([0, BLK, other, 0]));
      expect(Buffer.from(N.viewU8(other, 0, BLK)).equals(ref.subarray(0, BLK))).toBe(true);
      expect(() => N.loaderFixBuffer(id, 987654)).toThrow(/loaderFixBuffer: buffer 987654 is not a live buffer/);
      N.free(other);
      N.closeLoader(id);
    }
  });

  it("O_DIRECT alignment: the device's sector (sysfs) when it is 512 bytes, and reads at that alignment match readFileSync", () => {
    // the independent reference: the logical block size of the block device holding the file
    const dev = statSync(file).dev;
    const major = (dev >> 8) & 0xfff;
    const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    const sysfs = `/sys/dev/block/${major}:${minor}`;
    // a partition's queue is its disk's
    const queue = [`${sysfs}/queue/logical_block_size`, `${sysfs}/../queue/logical_block_size`].find((f) => existsSync(f));
    const sector = queue ? Number(readFileSync(queue, "utf8")) : undefined;
    for (const backend of backends) {
      const id = N.openLoader(file, { backend, queueDepth: 4, directIO: true });
      const A = N.loaderInfo(id).align;
      expect([512, 4096]).toContain(A);
      if (sector !== undefined) expect(A).toBe(Math.max(512, sector));
      // three requests at offsets, lengths and destinations that are multiples of A only
      const buf = N.alloc(64 * A + BLK);
      const reqs = [
        [3, 5, 1],
        [101, 1, 7],
        [1, 9, 13],
      ].map(([off, len, at]) => [off! * A, len! * A, buf, at! * A]); // in units of A
      expect(N.readBatch(id, new Float64Array(reqs.flat()))).toBe(15 * A);
      for (const [off, len, , at] of reqs) expect(Buffer.from(N.viewU8(buf, at!, len!)).equals(ref.subarray(off!, off! + len!)), `${backend} ${off}+${len}`).toBe(true);
      const buffered = N.openLoader(file, { backend, queueDepth: 4, directIO: false });
      expect(N.loaderInfo(buffered).align).toBe(1);
      N.closeLoader(buffered);
      N.free(buf);
      N.closeLoader(id);
    }
  });

  it("unaligned reads work without O_DIRECT", () => {
    for (const backend of backends) {
      const id = N.openLoader(file, { backend, queueDepth: 4, directIO: false });
      const buf = N.alloc(10000);
      N.readBatch(id, new Float64Array([12345, 777, buf, 3, 1000001, 5000, buf, 1000]));
      const v = N.viewU8(buf, 0, 10000);
      expect(Buffer.from(v.subarray(3, 780)).equals(ref.subarray(12345, 12345 + 777))).toBe(true);
      expect(Buffer.from(v.subarray(1000, 6000)).equals(ref.subarray(1000001, 1005001))).toBe(true);
      N.free(buf);
      N.closeLoader(id);
    }
  });

  it("misaligned O_DIRECT requests throw a RangeError naming the request", () => {
    for (const backend of backends) {
      const id = N.openLoader(file, { backend, queueDepth: 4, directIO: true });
      const A = N.loaderInfo(id).align; // 512 or 4096: every value below is misaligned for both
      const buf = N.alloc(4 * BLK);
      const ok = [0, BLK, buf, 0];
      expect(() => N.readBatch(id, new Float64Array([...ok, 100, BLK, buf, 0]))).toThrow(RangeError);
      expect(() => N.readBatch(id, new Float64Array([...ok, 100, BLK, buf, 0]))).toThrow(
        new RegExp(`readBatch: request 1 \\(fileOffset 100.*fileOffset 100 is not ${A}-aligned`),
      );
      expect(() => N.readBatch(id, new Float64Array([0, 1000, buf, 0]))).toThrow(
        new RegExp(`request 0 .*length 1000 is not a multiple of ${A}`),
      );
      expect(() => N.readBatch(id, new Float64Array([0, BLK, buf, 256]))).toThrow(
        new RegExp(`request 0 .*destination address \\(dstOffset 256\\) is not ${A}-aligned`),
      );
      // destination bounds
      expect(() => N.readBatch(id, new Float64Array([0, 2 * BLK, buf, 3 * BLK]))).toThrow(
        /request 0 .*destination out of range: need 8192 bytes at offset 12288, buffer has 16384/,
      );
      expect(() => N.readBatch(id, new Float64Array([0, BLK, 987654, 0]))).toThrow(/buffer 987654 is not a live buffer/);
      expect(() => N.readBatch(id, new Float64Array([0, BLK, buf]))).toThrow(/not a multiple of 4/);
      expect(() => N.readBatch(id, new Float64Array([-4096, BLK, buf, 0]))).toThrow(/fileOffset must be a non-negative integer/);
      N.free(buf);
      N.closeLoader(id);
    }
  });

  for (const backend of backends)
    it(`${backend}: background reads (readBatchStart/readBatchWait) land, then copy, byte for byte`, () => {
      const id = N.openLoader(file, { backend, queueDepth: 16, directIO: true });
      const nBlocks = (8 * MiB) / BLK;
      const staging = N.alloc(64 * BLK);
      const dst = N.alloc(64 * 5000);
      // two batches in flight at once, each 32 blocks into its half of staging; each block's
      // first 3000 bytes are then copied to an unaligned place in dst
      const tickets: number[] = [];
      const want = Buffer.alloc(64 * 5000);
      for (let b = 0; b < 2; b++) {
        const idx = blocks(32, nBlocks, 31 + b);
        const req = new Float64Array(32 * 4);
        const copies = new Float64Array(32 * 3);
        for (let i = 0; i < 32; i++) {
          const k = b * 32 + i;
          req.set([idx[i] * BLK, BLK, staging, k * BLK], i * 4);
          copies.set([k * 5000 + 7, k * BLK, 3000], i * 3);
          ref.copy(want, k * 5000 + 7, idx[i] * BLK, idx[i] * BLK + 3000);
        }
        tickets.push(N.readBatchStart(id, req, dst, staging, copies));
      }
      expect(tickets[1]).toBeGreaterThan(tickets[0]);
      const before = Number(process.hrtime.bigint() / 1000n);
      const second = N.readBatchWait(tickets[1]); // FIFO: the first is done too
      const after = Number(process.hrtime.bigint() / 1000n);
      const first = N.readBatchWait(tickets[0]);
      expect([first.bytes, second.bytes]).toEqual([32 * BLK, 32 * BLK]);
      // the times are on process.hrtime's clock: the batches ran one after the other, before the wait returned
      expect(first.t0).toBeLessThanOrEqual(first.t1);
      expect(first.t1).toBeLessThanOrEqual(second.t0);
      expect(second.t1).toBeLessThanOrEqual(after + 1);
      expect(second.t1).toBeGreaterThan(before - 10_000_000);
      expect(Buffer.from(N.viewU8(dst, 0, 64 * 5000)).equals(want)).toBe(true);
      // a ticket is waited for once; errors name the function
      expect(() => N.readBatchWait(tickets[0])).toThrow(/readBatchWait: ticket \d+ is not a batch in flight/);
      expect(() => N.readBatchStart(id, new Float64Array([100, BLK, staging, 0]), dst, staging, new Float64Array())).toThrow(
        /readBatchStart: request 0 .*fileOffset 100 is not (512|4096)-aligned/,
      );
      expect(() => N.readBatchStart(id, new Float64Array([0, BLK, staging, 0]), dst, staging, new Float64Array([64 * 5000 - 10, 0, 11]))).toThrow(
        /readBatchStart: copy 0: dst range .* outside buffer of 320000 bytes/,
      );
      // a read error is reported by the wait, naming the file and offset; the loader still works
      const t = N.readBatchStart(id, new Float64Array([8 * MiB, BLK, staging, 0]), dst, staging, new Float64Array());
      expect(() => N.readBatchWait(t)).toThrow(`readBatchWait: ${file}: short read at offset ${8 * MiB}: got 0 of 4096 bytes`);
      // freeing the buffers while a batch is in flight is safe: the batch holds them
      const s2 = N.alloc(BLK);
      const d2 = N.alloc(BLK);
      const t2 = N.readBatchStart(id, new Float64Array([BLK, BLK, s2, 0]), d2, s2, new Float64Array([0, 0, BLK]));
      N.free(s2);
      expect(N.readBatchWait(t2).bytes).toBe(BLK);
      expect(Buffer.from(N.viewU8(d2, 0, BLK)).equals(ref.subarray(BLK, 2 * BLK))).toBe(true);
      N.free(d2);
      N.free(staging);
      N.free(dst);
      N.closeLoader(id);
    });

  it.runIf(uringOk)("a single-issuer ring: background batches (deeper and shallower than the ring) land byte for byte, into a buffer registered before the first read; the ring then refuses reads from another thread, another lane's among them; two lanes read at once", () => {
    for (const queueDepth of [256, 16]) {
      const id = N.openLoader(file, { backend: "uring", queueDepth, directIO: true, singleIssuer: true });
      const info = N.loaderInfo(id);
      // this kernel (6.1+) grants the flags; an older one would say why in the note
      expect(info.singleIssuer).toBe(true);
      const nBlocks = (8 * MiB) / BLK;
      const staging = N.alloc(256 * BLK);
      const other = N.alloc(256 * BLK);
      expect(N.loaderFixBuffer(id, staging)).toBe("");
      const dst = N.alloc(256 * BLK);
      for (let round = 0; round < 3; round++) {
        // 256 blocks a batch: into the registered buffer, then (round 1) into another one
        const into = round === 1 ? other : staging;
        const idx = blocks(256, nBlocks, 7 + round);
        const req = new Float64Array(256 * 4);
        const copies = new Float64Array(256 * 3);
        for (let i = 0; i < 256; i++) {
          req.set([idx[i] * BLK, BLK, into, i * BLK], i * 4);
          copies.set([(255 - i) * BLK, i * BLK, BLK], i * 3);
        }
        expect(N.readBatchWait(N.readBatchStart(id, req, dst, into, copies)).bytes).toBe(256 * BLK);
        const want = Buffer.concat(idx.map((b) => ref.subarray(b * BLK, (b + 1) * BLK)).reverse());
        expect(Buffer.from(N.viewU8(dst, 0, 256 * BLK)).equals(want)).toBe(true);
      }
      expect(() => N.readBatch(id, new Float64Array([0, BLK, staging, 0]))).toThrow(
        `readBatch: ${file}: this loader's io_uring ring belongs to the thread that read first (single issuer); read from that thread only`,
      );
      // and stays usable by its thread
      const t = N.readBatchStart(id, new Float64Array([BLK, BLK, staging, 0]), dst, staging, new Float64Array([0, 0, BLK]));
      expect(N.readBatchWait(t).bytes).toBe(BLK);
      expect(Buffer.from(N.viewU8(dst, 0, BLK)).equals(ref.subarray(BLK, 2 * BLK))).toBe(true);
      for (const b of [staging, other, dst]) N.free(b);
      N.closeLoader(id);
    }
    // two lanes (two background threads): each single-issuer loader is read on one lane; a batch
    // on lane 1 lands byte for byte whatever lane 0 holds, and its ticket is its own
    const a = N.openLoader(file, { backend: "uring", queueDepth: 64, directIO: true, singleIssuer: true });
    const b = N.openLoader(file, { backend: "uring", queueDepth: 64, directIO: true, singleIssuer: true });
    const stA = N.alloc(64 * BLK);
    const stB = N.alloc(64 * BLK);
    const dA = N.alloc(64 * BLK);
    const dB = N.alloc(64 * BLK);
    const batch = (seed: number, into: number) => {
      const idx = blocks(64, (8 * MiB) / BLK, seed);
      const req = new Float64Array(64 * 4);
      const copies = new Float64Array(64 * 3);
      for (let i = 0; i < 64; i++) {
        req.set([idx[i] * BLK, BLK, into, i * BLK], i * 4);
        copies.set([i * BLK, i * BLK, BLK], i * 3);
      }
      return { req, copies, want: Buffer.concat(idx.map((k) => ref.subarray(k * BLK, (k + 1) * BLK))) };
    };
    const x = batch(41, stA);
    const y = batch(43, stB);
    const tA = N.readBatchStart(a, x.req, dA, stA, x.copies, 0);
    const tB = N.readBatchStart(b, y.req, dB, stB, y.copies, 1);
    expect(tB).not.toBe(tA);
    expect(N.readBatchWait(tB).bytes).toBe(64 * BLK); // lane 1 first: lane 0's batch may still run
    expect(N.readBatchWait(tA).bytes).toBe(64 * BLK);
    expect(Buffer.from(N.viewU8(dA, 0, 64 * BLK)).equals(x.want)).toBe(true);
    expect(Buffer.from(N.viewU8(dB, 0, 64 * BLK)).equals(y.want)).toBe(true);
    expect(() => N.readBatchWait(tB)).toThrow(new RegExp(`readBatchWait: ticket ${tB} is not a batch in flight`));
    // loader a's ring belongs to lane 0's thread: on lane 1 its batch fails, naming why
    expect(() => N.readBatchWait(N.readBatchStart(a, x.req, dA, stA, x.copies, 1))).toThrow(/belongs to the thread that read first \(single issuer\)/);
    expect(() => N.readBatchStart(a, x.req, dA, stA, x.copies, 3)).toThrow("readBatchStart: lane 3 is not 0..2");
    expect(() => N.readBatchStart(a, x.req, dA, stA, x.copies, "1" as unknown as number)).toThrow("readBatchStart: lane must be a number");
    for (const buf of [stA, stB, dA, dB]) N.free(buf);
    N.closeLoader(a);
    N.closeLoader(b);
    // a plain loader (the default) says so
    const plain = N.openLoader(file, { backend: "uring", queueDepth: 4, directIO: true });
    expect(N.loaderInfo(plain).singleIssuer).toBe(false);
    N.closeLoader(plain);
    expect(() => N.openLoader(file, { backend: "uring", queueDepth: 4, directIO: true, singleIssuer: 1 as unknown as boolean })).toThrow(
      "openLoader: opts.singleIssuer must be a boolean",
    );
  });

  it.runIf(uringOk)("the caller lane (2): batches submitted at once and reaped by the wait on the same thread land byte for byte, in flight together and waited for in any order, deeper than the ring, beside synchronous reads; an error names file and offset and leaves the loader working; a pread loader refuses", () => {
    const nBlocks = (8 * MiB) / BLK;
    for (const singleIssuer of [true, false]) {
      // a depth of 16: the batches of 64 below are refilled while they are waited for
      const id = N.openLoader(file, { backend: "uring", queueDepth: 16, directIO: true, singleIssuer });
      const staging = N.alloc(3 * 64 * BLK);
      const dst = N.alloc(3 * 64 * 3000);
      const want = Buffer.alloc(3 * 64 * 3000);
      const tickets: number[] = [];
      for (let b = 0; b < 3; b++) {
        const idx = blocks(64, nBlocks, 101 + b);
        const req = new Float64Array(64 * 4);
        const copies = new Float64Array(64 * 3);
        for (let i = 0; i < 64; i++) {
          const k = b * 64 + i;
          req.set([idx[i] * BLK, BLK, staging, k * BLK], i * 4);
          // each block's bytes 100..3100 to a packed place in dst, in reverse order within the batch
          copies.set([(b * 64 + 63 - i) * 3000, k * BLK + 100, 3000], i * 3);
          ref.copy(want, (b * 64 + 63 - i) * 3000, idx[i] * BLK + 100, idx[i] * BLK + 3100);
        }
        tickets.push(N.readBatchStart(id, req, dst, staging, copies, 2));
      }
      // a synchronous batch on the same ring while three wait to be reaped
      const { got, want: w } = readBlocks(id, blocks(20, nBlocks, 9), new Array(20).fill(1));
      expect(got.equals(w)).toBe(true);
      // the last first, then the first, then the middle one
      const t0 = Number(process.hrtime.bigint() / 1000n);
      for (const k of [2, 0, 1]) {
        const d = N.readBatchWait(tickets[k]);
        expect(d.bytes).toBe(64 * BLK);
        // submitted before, reaped by this wait (the clock of process.hrtime)
        expect(d.t0).toBeLessThanOrEqual(t0 + 1);
        expect(d.t1).toBeGreaterThanOrEqual(d.t0);
        expect(Buffer.from(N.viewU8(dst, k * 64 * 3000, 64 * 3000)).equals(want.subarray(k * 64 * 3000, (k + 1) * 64 * 3000))).toBe(true);
      }
      expect(() => N.readBatchWait(tickets[0])).toThrow(/readBatchWait: ticket \d+ is not a batch in flight/);
      // a read past the end fails at the wait, naming file and offset; the batch beside it lands
      const bad = N.readBatchStart(id, new Float64Array([8 * MiB, BLK, staging, 0]), dst, staging, new Float64Array(), 2);
      const ok = N.readBatchStart(id, new Float64Array([5 * BLK, BLK, staging, BLK]), dst, staging, new Float64Array([0, BLK, BLK]), 2);
      expect(() => N.readBatchWait(bad)).toThrow(`readBatchWait: ${file}: short read at offset ${8 * MiB}: got 0 of 4096 bytes`);
      expect(N.readBatchWait(ok).bytes).toBe(BLK);
      expect(Buffer.from(N.viewU8(dst, 0, BLK)).equals(ref.subarray(5 * BLK, 6 * BLK))).toBe(true);
      // freeing the buffers while a batch is in flight is safe: the batch holds them
      const s2 = N.alloc(BLK);
      const d2 = N.alloc(BLK);
      const t2 = N.readBatchStart(id, new Float64Array([7 * BLK, BLK, s2, 0]), d2, s2, new Float64Array([0, 0, BLK]), 2);
      N.free(s2);
      expect(N.readBatchWait(t2).bytes).toBe(BLK);
      expect(Buffer.from(N.viewU8(d2, 0, BLK)).equals(ref.subarray(7 * BLK, 8 * BLK))).toBe(true);
      for (const b of [d2, staging, dst]) N.free(b);
      N.closeLoader(id);
    }
    // the batch is handed to the kernel during the caller's next parallel kernel call, not at the
    // wait: on a plain ring the reads land in staging before anything waits for them (the copies
    // into dst are the wait's)
    {
      const id = N.openLoader(file, { backend: "uring", queueDepth: 64, directIO: true });
      const staging = N.alloc(32 * BLK);
      const idx = blocks(32, nBlocks, 77);
      const req = new Float64Array(32 * 4);
      for (let i = 0; i < 32; i++) req.set([idx[i] * BLK, BLK, staging, i * BLK], i * 4);
      const want = Buffer.concat(idx.map((b) => ref.subarray(b * BLK, (b + 1) * BLK)));
      const t = N.readBatchStart(id, req, staging, staging, new Float64Array(), 2);
      // a 2048 × 2048 F32 matvec: work for every thread of the pool
      const w = N.alloc(2048 * 2048 * 4);
      const x = N.alloc(2048 * 4);
      const y = N.alloc(2048 * 4);
      N.matvec(GGMLType.F32, w, 0, 2048, 2048, x, 0, y, 0);
      let landed = false;
      for (let k = 0; k < 200 && !landed; k++) {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
        landed = Buffer.from(N.viewU8(staging, 0, 32 * BLK)).equals(want);
      }
      expect(landed).toBe(true);
      expect(N.readBatchWait(t).bytes).toBe(32 * BLK);
      for (const b of [w, x, y, staging]) N.free(b);
      N.closeLoader(id);
    }
    // a single-issuer ring first read on lane 0's thread belongs to it: the caller lane is refused at once
    const a = N.openLoader(file, { backend: "uring", queueDepth: 16, directIO: true, singleIssuer: true });
    const buf = N.alloc(BLK);
    N.readBatchWait(N.readBatchStart(a, new Float64Array([0, BLK, buf, 0]), buf, buf, new Float64Array(), 0));
    expect(() => N.readBatchStart(a, new Float64Array([0, BLK, buf, 0]), buf, buf, new Float64Array(), 2)).toThrow(
      `readBatchStart: ${file}: this loader's io_uring ring belongs to the thread that read first (single issuer); read from that thread only`,
    );
    N.closeLoader(a);
    // the pread backend has no ring to submit on
    const p = N.openLoader(file, { backend: "pread", queueDepth: 4, directIO: true });
    expect(() => N.readBatchStart(p, new Float64Array([0, BLK, buf, 0]), buf, buf, new Float64Array(), 2)).toThrow(
      `readBatchStart: ${file}: batches finished later need the io_uring backend`,
    );
    N.closeLoader(p);
    N.free(buf);
  });

  it("refuses a read-only file mapping as destination", () => {
    const m = N.mapFile(file);
    const id = N.openLoader(file, { backend: "pread", queueDepth: 1, directIO: false });
    expect(() => N.readBatch(id, new Float64Array([0, BLK, m.id, 0]))).toThrow(/read-only file mapping/);
    N.closeLoader(id);
    N.free(m.id);
  });

  for (const backend of backends)
    for (const directIO of [true, false])
      it(`${backend} directIO=${directIO}: a request past EOF is an error naming file and offset`, () => {
        const id = N.openLoader(file, { backend, queueDepth: 8, directIO });
        const buf = N.alloc(4 * BLK);
        const end = 8 * MiB;
        // runs 4096 bytes past the end
        expect(() => N.readBatch(id, new Float64Array([0, BLK, buf, 0, end - BLK, 2 * BLK, buf, BLK]))).toThrow(
          `readBatch: ${file}: short read at offset ${end - BLK}: got 4096 of 8192 bytes`,
        );
        // entirely past the end
        expect(() => N.readBatch(id, new Float64Array([end + BLK, BLK, buf, 0]))).toThrow(
          `readBatch: ${file}: short read at offset ${end + BLK}: got 0 of 4096 bytes`,
        );
        // the loader still works afterwards
        N.readBatch(id, new Float64Array([BLK, BLK, buf, 0]));
        expect(Buffer.from(N.viewU8(buf, 0, BLK)).equals(ref.subarray(BLK, 2 * BLK))).toBe(true);
        N.free(buf);
        N.closeLoader(id);
      });

  it("an I/O error names the file, offset and length (EIO from /proc/self/mem)", () => {
    if (!existsSync("/proc/self/mem")) return;
    for (const backend of backends) {
      const id = N.openLoader("/proc/self/mem", { backend, queueDepth: 4, directIO: false });
      const buf = N.alloc(2 * BLK);
      expect(() => N.readBatch(id, new Float64Array([0, BLK, buf, 0, BLK, BLK, buf, BLK]))).toThrow(
        /^readBatch: \/proc\/self\/mem: read failed at offset 0 \(length 4096\): /,
      );
      N.free(buf);
      N.closeLoader(id);
    }
  });

  it("one loader shared by two worker threads (batches are serialised per loader)", async () => {
    const addon =
      process.env.NEURONPIPE_ADDON ?? join(dirname(fileURLToPath(import.meta.url)), "../../native/build/Release/neuronpipe.node");
    for (const backend of backends) {
      const id = N.openLoader(file, { backend, queueDepth: 8, directIO: true });
      const code = `
        const { parentPort, workerData } = require("node:worker_threads");
        const N = require(workerData.addon);
        const { id, seed } = workerData;
        const nb = 64, BLK = 4096, nBlocks = (8 << 20) / BLK;
        const buf = N.alloc(nb * BLK);
        const offs = [];
        let s = seed;
        for (let r = 0; r < 20; r++) {
          const req = new Float64Array(nb * 4);
          for (let i = 0; i < nb; i++) {
            s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
            offs[i] = (s % nBlocks) * BLK;
            req.set([offs[i], BLK, buf, i * BLK], i * 4);
          }
          N.readBatch(id, req);
        }
        const out = Buffer.from(N.viewU8(buf, 0, nb * BLK));
        N.free(buf);
        parentPort.postMessage({ offs, out });
      `;
      const run = (seed: number) =>
        new Promise<{ offs: number[]; out: Uint8Array }>((resolve, reject) => {
          const w = new Worker(code, { eval: true, workerData: { addon, id, seed } });
          w.once("message", resolve);
          w.once("error", reject);
        });
      const res = await Promise.all([run(1), run(2)]);
      for (const r of res) {
        const out = Buffer.from(r.out);
        r.offs.forEach((off, i) =>
          expect(out.subarray(i * BLK, (i + 1) * BLK).equals(ref.subarray(off, off + BLK))).toBe(true),
        );
      }
      N.closeLoader(id);
    }
  });

  it("missing file → error naming it; bad options → clear errors", () => {
    const missing = join(dir, "nope.bin");
    for (const backend of ["auto", "pread"] as const)
      expect(() => N.openLoader(missing, { backend, queueDepth: 4, directIO: true })).toThrow(
        `openLoader: ${missing}: cannot open: No such file or directory`,
      );
    expect(() => N.openLoader(file, { backend: "x" as never, queueDepth: 4, directIO: false })).toThrow(/opts.backend/);
    expect(() => N.openLoader(file, { backend: "pread", queueDepth: 0, directIO: false })).toThrow(/opts.queueDepth out of range/);
    expect(() => N.openLoader(dir, { backend: "pread", queueDepth: 1, directIO: false })).toThrow(/is a directory/);
    if (!uringOk)
      expect(() => N.openLoader(file, { backend: "uring", queueDepth: 4, directIO: false })).toThrow(/io_uring/);
    expect(() => N.closeLoader(999999)).toThrow(/closeLoader: loader 999999 is not an open loader/);
  });

  it("throughput (printed, not asserted): 4 KiB random O_DIRECT reads, 256 MiB file", { timeout: 120000 }, () => {
    const big = join(dir, "big.bin");
    const size = 256 * MiB;
    const fd = openSync(big, "w");
    const chunk = content(16 * MiB, 99);
    for (let off = 0; off < size; off += chunk.length) writeSync(fd, chunk, 0, chunk.length, off);
    fsyncSync(fd);
    closeSync(fd);
    const nBlocks = size / BLK;
    const batch = 256;
    const buf = N.alloc(batch * BLK);
    const lines: string[] = [];
    for (const backend of backends)
      for (const queueDepth of [1, 32]) {
        const id = N.openLoader(big, { backend, queueDepth, directIO: true });
        let seed = 4242 + queueDepth;
        let bytes = 0;
        const t0 = performance.now();
        while (performance.now() - t0 < 1500) {
          const idx = blocks(batch, nBlocks, seed++);
          const req = new Float64Array(batch * 4);
          for (let i = 0; i < batch; i++) req.set([idx[i] * BLK, BLK, buf, i * BLK], i * 4);
          bytes += N.readBatch(id, req);
        }
        const s = (performance.now() - t0) / 1000;
        lines.push(`${backend} depth ${queueDepth}: ${(bytes / MiB / s).toFixed(1)} MiB/s (${Math.round(bytes / BLK / s)} IOPS)`);
        N.closeLoader(id);
      }
    N.free(buf);
    rmSync(big, { force: true });
    console.log("[io throughput, 4 KiB random O_DIRECT reads]\n  " + lines.join("\n  "));
  });
});
