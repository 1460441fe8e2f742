// The shipped default model and, for a test file, its neuron pack written once into a scratch
// directory that is removed after the file's tests (the pack is built by the code under test,
// from the shipped profile and predictors, as `neuronpipe pack` does).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { writePack } from "../../src/sparse/pack/write.js";

export const root = join(import.meta.dirname, "..", "..");
export const defaultModel = join(root, "models", "neuronpipe-default.gguf");

/** A scratch directory (`prefix`…) and the path of the default model's pack in it, written before the file's tests. */
export function scratchDefaultPack(prefix: string): { dir: string; packPath: string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const packPath = join(dir, "default.pack.gguf");
  beforeAll(async () => {
    await writePack(defaultModel, packPath, { profile: `${defaultModel}.profile.gguf`, predictor: `${defaultModel}.predictor.gguf` });
  }, 120_000);
  return { dir, packPath };
}
