// Bounds checks and error messages: every bad call throws a clear JS error, never crashes.
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { N, GGMLType, bufF32, bufBytes, bufI32, freeAll } from "./helpers.js";

afterAll(() => freeAll());

describe("argument and bounds errors", () => {
  it("matvec: weight buffer too small names the argument, offset and sizes", () => {
    const w = bufBytes(1000), x = bufBytes(4096 * 4), y = bufBytes(4096 * 4);
    expect(() => N.matvec(GGMLType.Q4_0, w, 128, 4096, 4096, x, 0, y, 0)).toThrow(
      new RangeError(`matvec: weight buffer ${w} too small: need 9437184 bytes at offset 128, have 1000`),
    );
  });

  it("out-of-range offsets on x / y / views / copy", () => {
    const w = bufBytes(64 * 64 * 4), x = bufBytes(64 * 4), y = bufBytes(64 * 4);
    expect(() => N.matvec(GGMLType.F32, w, 0, 64, 64, x, 4, y, 0)).toThrow(/matvec: x buffer \d+ too small/);
    expect(() => N.matvec(GGMLType.F32, w, 0, 64, 64, x, 0, y, 8)).toThrow(/matvec: y buffer \d+ too small/);
    expect(() => N.viewF32(x, 0, 65)).toThrow(RangeError);
    expect(() => N.viewF32(x, 2, 4)).toThrow(/viewF32: view offset 2 is not 4-byte aligned/);
    expect(() => N.copy(x, 200, y, 0, 100)).toThrow(/copy: dst buffer \d+ too small/);
    expect(() => N.matvec(GGMLType.F32, w, -1, 64, 64, x, 0, y, 0)).toThrow(/matvec: wOff out of range/);
    expect(() => N.matvec(GGMLType.F32, w, 1.5, 64, 64, x, 0, y, 0)).toThrow(TypeError);
  });

  it("wrong type id", () => {
    const b = bufBytes(4096);
    expect(() => N.matvec(3, b, 0, 1, 32, b, 0, b, 0)).toThrow(/matvec: type 3 is not a supported type/);
    expect(() => N.quantize(7, b, 0, b, 0, 1, 32)).toThrow(/quantize: type 7/);
    expect(() => N.rowBytes(99, 32)).toThrow(/rowBytes: type 99/);
    expect(() => N.kvStore(GGMLType.Q4_0, b, 0, 4, 32, 0, 1, b, 0)).toThrow(/kvStore: kvType 2 is not a supported type/);
  });

  it("cols not a multiple of 32 for Q types", () => {
    const b = bufBytes(1 << 16);
    for (const t of [GGMLType.Q4_0, GGMLType.Q8_0]) {
      expect(() => N.matvec(t, b, 0, 2, 48, b, 0, b, 0)).toThrow(/cols 48 is not a multiple of 32/);
      expect(() => N.rowBytes(t, 33)).toThrow(/rowBytes: cols 33 is not a multiple of 32/);
      expect(() => N.quantize(t, b, 0, b, 0, 1, 40)).toThrow(/quantize: cols 40/);
      expect(() => N.axpyRows(t, b, 0, 2, 20, b, 0, 0, b, 0, b, 0)).toThrow(/axpyRows: cols 20/);
    }
    expect(N.rowBytes(GGMLType.F16, 33)).toBe(66);
    expect(N.rowBytes(GGMLType.Q4_0, 4096)).toBe(2304);
    expect(N.rowBytes(GGMLType.Q8_0, 4096)).toBe(4352);
  });

  it("idx out of range, ctx overflow, bad gate kind, bad SIMD level, bad thread count", () => {
    const w = bufF32(new Float32Array(4 * 32)), x = bufF32(new Float32Array(32)), y = bufBytes(64);
    const idx = bufI32([0, 4]);
    expect(() => N.matvecRows(GGMLType.F32, w, 0, 4, 32, idx, 0, 2, x, 0, y, 0)).toThrow(
      /matvecRows: idx\[1\] = 4 out of range \(rows 4\)/,
    );
    expect(() => N.axpyRows(GGMLType.F32, w, 0, 4, 32, idx, 0, 2, x, 0, y, 0)).toThrow(/axpyRows: idx\[1\]/);
    const c = bufBytes(4 * 8 * 4);
    expect(() => N.kvStore(GGMLType.F32, c, 0, 4, 8, 3, 2, x, 0)).toThrow(/kvStore: positions 3..4 exceed ctx 4/);
    expect(() => N.attention(GGMLType.F32, x, 0, c, 0, c, 0, 4, 3, 2, 4, 0, 1, y, 0)).toThrow(
      /attention: nHead 3 is not a multiple of nHeadKv 2/,
    );
    expect(() => N.gatedAct(5, x, 0, x, 0, x, 0, 4)).toThrow(/gatedAct: kind 5/);
    expect(() => N.setSimd("sse" as never)).toThrow(/setSimd: level must be/);
    expect(() => N.setThreads(0)).toThrow(RangeError);
    expect(() => N.setThreads(65)).toThrow(RangeError);
    expect(() => N.rope(x, 0, 1, 1, 8, 3, 0, 10000, false)).toThrow(/rope: ropeDim 3 must be even/);
  });

  it("freed / unknown buffer ids", () => {
    const id = N.alloc(64);
    N.free(id);
    expect(() => N.free(id)).toThrow(/free: buffer \d+ is not a live buffer/);
    expect(() => N.bufferSize(id)).toThrow(/not a live buffer/);
    expect(() => N.viewU8(id, 0, 1)).toThrow(/viewU8: view buffer \d+ is not a live buffer/);
    expect(() => N.add(123456789, 0, 123456789, 0, 123456789, 0, 1)).toThrow(/add: a buffer 123456789 is not a live buffer/);
  });

  it("mapFile on a missing path throws naming the path", () => {
    expect(() => N.mapFile("/nonexistent/dir/model.gguf")).toThrow(
      /mapFile: cannot open '\/nonexistent\/dir\/model.gguf': No such file or directory/,
    );
    expect(() => N.mapFile(tmpdir())).toThrow(/is not a regular file/);
  });
});

describe("memory semantics", () => {
  it("alloc is zeroed and 4 KiB aligned in size accounting; views alias", () => {
    const id = N.alloc(10000);
    expect(N.bufferSize(id)).toBe(10000);
    const a = N.viewU8(id, 0, 10000);
    expect(a.every((v) => v === 0)).toBe(true);
    const f = N.viewF32(id, 16, 4);
    const g = N.viewF32(id, 16, 4);
    f[1] = 2.5;
    expect(g[1]).toBe(2.5);
    expect(N.viewI32(id, 16, 4)[1]).toBe(0x40200000);
    N.free(id);
  });

  it("a freed buffer stays valid while a view is alive", () => {
    const id = N.alloc(4096);
    const v = N.viewF32(id, 0, 1024);
    v.fill(7);
    N.free(id);
    // memory must still be readable/writable through the view
    v[1023] = 8;
    expect(v[0]).toBe(7);
    expect(v[1023]).toBe(8);
  });

  it("discard() gives a large buffer's pages back at once even while a view holds it: a stale view reads zeros; free() keeps them for the view", () => {
    // synchronous JS never lets the collector finalise views, so freed matrices once piled up
    // (the 7B predictor fit was killed for memory): 40 × 128 MiB written through views
    const rss0 = process.memoryUsage().rss;
    let peak = rss0;
    let last: Float32Array | undefined;
    for (let i = 0; i < 40; i++) {
      const id = N.alloc(128 * 2 ** 20);
      last = N.viewF32(id, 0, 32 * 2 ** 20);
      last.fill(1);
      N.discard(id);
      peak = Math.max(peak, process.memoryUsage().rss);
    }
    expect(peak - rss0).toBeLessThan(1024 * 2 ** 20); // with free(): ~5 GiB until the views are collected
    expect(last![0]).toBe(0);
    expect(last![last!.length - 1]).toBe(0);
    const id = N.alloc(8 * 2 ** 20);
    const kept = N.viewF32(id, 0, 2 * 2 ** 20);
    kept.fill(3);
    N.free(id);
    expect([kept[0], kept[kept.length - 1]]).toEqual([3, 3]);
    expect(() => N.discard(id)).toThrow(/discard: buffer \d+ is not a live buffer/);
  });

  it("mapFile maps a file read-only with its size", () => {
    const dir = mkdtempSync(join(tmpdir(), "np-"));
    const p = join(dir, "w.bin");
    const data = new Float32Array([1, 2, 3, 4.5]);
    writeFileSync(p, Buffer.from(data.buffer));
    try {
      const { id, size } = N.mapFile(p);
      expect(size).toBe(16);
      expect(Array.from(N.viewF32(id, 0, 4))).toEqual([1, 2, 3, 4.5]);
      // kernels read mapped buffers directly
      const out = bufBytes(4);
      N.matvec(GGMLType.F32, id, 0, 1, 4, id, 0, out, 0);
      expect(N.viewF32(out, 0, 1)[0]).toBe(1 + 4 + 9 + 20.25);
      N.free(id);
      const empty = join(dir, "empty.bin");
      writeFileSync(empty, "");
      const e = N.mapFile(empty);
      expect(e.size).toBe(0);
      N.free(e.id);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("runtime info", () => {
    expect(["scalar", "avx2", "avx512"]).toContain(N.bestSimd());
    const b = N.buildInfo();
    expect(typeof b.liburing).toBe("boolean");
    expect(typeof b.openblas).toBe("boolean");
    expect(b.compiler.length).toBeGreaterThan(0);
    N.setThreads(3);
    expect(N.getThreads()).toBe(3);
    N.setThreads(2);
  });
});
