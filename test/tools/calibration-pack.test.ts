// The pack the probe calibrates the decoders on: written once into the cache directory, named by
// the shipped profile's and predictor's contents, so a pack cached from an older shipped profile
// (another neuron order) is replaced, not calibrated on.
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { calibrationPack } from "../../src/tools/calibrate.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { readProfile } from "../../src/sparse/profile-file.js";
import { shippedFile } from "../../src/util/package-files.js";

const dir = mkdtempSync(join(tmpdir(), "np-calibration-pack-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it("is laid out in the shipped profile's order; a stale cached pack is removed; a second call reuses the file", async () => {
  const stale = join(dir, "calibration.pack.gguf");
  writeFileSync(stale, "a pack of an older profile");
  const path = await calibrationPack(dir);
  const profile = readProfile(`${shippedFile("neuronpipe-default.gguf")}.profile.gguf`);
  openPack(path).layers.forEach((l, i) => expect(Array.from(l.order)).toEqual(Array.from(profile.layers[i]!.order!)));
  if (path.startsWith(dir)) {
    // no built pack in models/ newer than the profile: the cache was used
    expect(path).toMatch(/calibration-[0-9a-f]{16}\.pack\.gguf$/);
    expect(existsSync(stale)).toBe(false);
    const t = statSync(path).mtimeMs;
    expect(await calibrationPack(dir)).toBe(path);
    expect(statSync(path).mtimeMs).toBe(t);
  }
}, 120_000);
