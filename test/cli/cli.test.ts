// The CLI's commands through main(argv), capturing what they print.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Readable } from "node:stream";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli.js";
import { readGGUF } from "../../src/gguf/reader.js";
import { loadModel } from "../../src/api/model.js";

const dir = mkdtempSync(join(tmpdir(), "np-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cli = (...argv: string[]) => runCli(argv);

describe("neuronpipe CLI", () => {
  it("--help on every command", async () => {
    const top = await cli("--help");
    expect(top.code).toBe(0);
    for (const c of ["generate", "inspect", "synth", "quantize", "convert", "eval", "profile", "train-predictor"]) {
      expect(top.out).toContain(c);
      const h = await cli(c, "--help");
      expect(h.code).toBe(0);
      expect(h.out).toMatch(new RegExp(`usage: neuronpipe ${c}`));
    }
  });

  it("synth writes the requested shape; inspect describes it", async () => {
    const p = join(dir, "s.gguf");
    const r = await cli("synth", "--out", p, "--embd", "64", "--ff", "96", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--type", "q8_0", "--activation", "reglu");
    expect(r.code).toBe(0);
    const f = readGGUF(p);
    expect(f.tensorsByName.get("blk.1.ffn_gate.weight")?.ne).toEqual([64, 96]);
    expect(f.tensorsByName.get("blk.0.attn_k.weight")?.ne).toEqual([64, 32]);
    expect(f.tensorsByName.get("blk.0.attn_q.weight")?.type).toBe(8);
    expect(f.metadata.get("neuronpipe.ffn_activation")?.value).toBe("reglu");
    const i = await cli("inspect", p);
    expect(i.out).toContain("llama.feed_forward_length = 96");
    expect(i.out).toContain('"activation":"reglu"');
    expect(i.out).toMatch(/blk\.0\.attn_q\.weight\s+Q8_0\s+\[64, 64\]/);
    const j = JSON.parse((await cli("inspect", p, "--json")).out);
    expect(j.tensors.length).toBe(f.tensors.length);
  });

  it("generate --json prints ids, text and timings that match the library", async () => {
    const p = join(dir, "g.gguf");
    await cli("synth", "--out", p, "--shape", "tiny", "--type", "q4_0");
    const r = await cli("generate", "--model", p, "--prompt", "Hello there", "--max-tokens", "10", "--json");
    expect(r.code).toBe(0);
    const j = JSON.parse(r.out);
    expect(j.tokens).toHaveLength(10);
    const model = await loadModel(p);
    const pieces = Buffer.concat(j.tokens.map((id: number) => model.tokenizer.tokenToPiece(id, false)));
    expect(j.text).toBe(new TextDecoder().decode(pieces));
    expect(j.promptTokens).toEqual(model.tokenizer.encode("Hello there"));
    expect(j.stats.decodeTokensPerSecond).toBeGreaterThan(0);
    model.dispose();
    const plain = await cli("generate", "--model", p, "--prompt", "Hello there", "--max-tokens", "10");
    expect(plain.out).toBe(`Hello there${j.text}\n`);
    expect(plain.err).toMatch(/generated 10 tok, [\d.]+ tok\/s/);
  });

  it("llama.cpp's flags: -m -p -n -c -t -f, --temp, --stop, -p - and a piped prompt, --version", async () => {
    const p = join(dir, "g.gguf"); // written by the test above
    const long = await cli("generate", "--model", p, "--prompt", "Hello there", "--max-tokens", "10", "--temperature", "0", "--threads", "1", "--ctx", "64", "--json");
    const short = await cli("generate", "-m", p, "-p", "Hello there", "-n", "10", "--temp", "0", "-t", "1", "-c", "64", "--json");
    const a = JSON.parse(long.out);
    const b = JSON.parse(short.out);
    expect(b.tokens).toEqual(a.tokens);
    expect([b.sampling.temperature, b.stats.threads]).toEqual([0, 1]);
    // -f: the prompt from a file; -p -: from stdin (given to main as the terminal's stdin)
    writeFileSync(join(dir, "prompt.txt"), "Hello there");
    expect(JSON.parse((await cli("generate", "-m", p, "-f", join(dir, "prompt.txt"), "-n", "10", "--temp", "0", "--json")).out).tokens).toEqual(a.tokens);
    const piped = await runCli(["generate", "-m", p, "-p", "-", "-n", "10", "--temp", "0", "--json"], {}, { stdin: Readable.from([Buffer.from("Hello "), Buffer.from("there")]) as unknown as NodeJS.ReadStream });
    expect(JSON.parse(piped.out).tokens).toEqual(a.tokens);
    // --stop: the text up to the stop string (the reference: the text without one)
    const stop = a.text.slice(2, 4);
    const cut = JSON.parse((await cli("generate", "-m", p, "-p", "Hello there", "-n", "10", "--temp", "0", "--stop", "\u0001x", "--stop", stop, "--json")).out);
    expect(cut.text).toBe(a.text.slice(0, a.text.indexOf(stop)));
    expect(cut.stats.stopReason).toBe("stop-sequence");
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
    expect((await cli("--version")).out).toBe(`neuronpipe ${pkg.version}\n`);
    expect((await cli("generate", "--version")).out).toBe(`neuronpipe ${pkg.version}\n`);
    // --max-tokens 0 generates nothing and says so
    const zero = JSON.parse((await cli("generate", "-m", p, "-p", "Hello there", "-n", "0", "--json")).out);
    expect([zero.tokens, zero.stats.generatedTokens]).toEqual([[], 0]);
  });

  it("generate -i is the chat (llama.cpp's interactive flag): the same replies as `chat` for piped messages", async () => {
    const p = join(dir, "g.gguf");
    const stdin = () => Readable.from([Buffer.from("Hello\nMore\n/exit\n")]) as unknown as NodeJS.ReadStream;
    const a = await runCli(["generate", "-i", "-m", p, "-n", "6", "--temp", "0"], {}, { stdin: stdin() });
    const b = await runCli(["chat", "-m", p, "-n", "6", "--temp", "0"], {}, { stdin: stdin() });
    expect(a.code).toBe(0);
    expect(a.out).toBe(b.out);
    expect(a.out.split("> ").length).toBeGreaterThanOrEqual(3);
    expect((await cli("generate", "-i", "-p", "x")).err).toMatch(/-i \(interactive\) reads the messages from the terminal/);
  });

  it("a command-line mistake prints one line and a hint, not the whole help", async () => {
    const cases: [string[], RegExp][] = [
      [["generate", "--frob"], /^neuronpipe generate: unknown option --frob$/],
      [["generate", "-t", "999"], /^neuronpipe generate: --threads must be a whole number from 1 to 64, got "999"$/],
      [["generate", "--temp", "0", "--temperature", "1"], /^neuronpipe generate: --temp and --temperature are the same option: give one of them$/],
      [["generate", "-f", join(dir, "none.txt")], /^neuronpipe generate: --file .*none\.txt: cannot read \(ENOENT\)$/],
      [["generate", "--stop", ""], /^neuronpipe generate: --stop needs a non-empty string$/],
      [["generaet"], /^neuronpipe: unknown command "generaet" \(did you mean generate\?\); `neuronpipe --help` lists the commands$/],
    ];
    for (const [argv, line] of cases) {
      const r = await cli(...argv);
      expect(r.code).toBe(2);
      const lines = r.err.trimEnd().split("\n");
      expect(lines[0]).toMatch(line);
      expect(lines.length).toBeLessThanOrEqual(2);
      if (lines[1]) expect(lines[1]).toMatch(/--help/);
    }
  });

  it("bench prints llama-bench's table (ppN, tgN, mean ± sd) and JSON whose averages are the samples' mean and sd", async () => {
    const p = join(dir, "g.gguf");
    const j = JSON.parse((await cli("bench", "-m", p, "-p", "16", "-n", "8", "-r", "3", "--json")).out);
    expect(j.map((r: { test: string }) => r.test)).toEqual(["pp16", "tg8"]);
    for (const r of j) {
      expect(r.samples_ts).toHaveLength(3);
      const mean = r.samples_ts.reduce((a: number, b: number) => a + b, 0) / 3;
      const sd = Math.sqrt(r.samples_ts.reduce((a: number, b: number) => a + (b - mean) ** 2, 0) / 2);
      expect(r.avg_ts).toBeCloseTo(mean, 6);
      expect(r.stddev_ts).toBeCloseTo(sd, 6);
      expect(r.avg_ts).toBeGreaterThan(0);
    }
    expect([j[0].n_prompt, j[0].n_gen, j[1].n_prompt, j[1].n_gen]).toEqual([16, 0, 0, 8]);
    const md = (await cli("bench", "-m", p, "-p", "16", "-n", "8", "-r", "2")).out.split("\n");
    expect(md[0]).toMatch(/^\| model +\| +size \| params \| decoder \| threads \| +test \| +t\/s \|$/);
    expect(md[2]).toMatch(/\| +pp16 \| +[\d.]+ ± [\d.]+ \|$/);
    expect(md[3]).toMatch(/\| +tg8 \| +[\d.]+ ± [\d.]+ \|$/);
    // a prompt longer than the context is cut, and the test's name says so
    expect((await cli("bench", "-m", p, "-p", "5000", "-n", "0", "-r", "1", "--json")).out).toMatch(/"test": "pp\d+ \(of 5000: context \d+\)"/);
  });

  it("commands refuse to overwrite an existing file without --force", async () => {
    const p = join(dir, "ow.gguf");
    expect((await cli("synth", "--out", p, "--shape", "tiny", "--type", "q8_0", "--tokenizer", "bytes")).code).toBe(0);
    const before = readFileSync(p);
    const again = await cli("synth", "--out", p, "--shape", "tiny", "--type", "q4_0", "--tokenizer", "bytes");
    expect(again.code).toBe(2);
    expect(again.err).toMatch(/ow\.gguf exists: --force overwrites it, --out PATH writes elsewhere/);
    expect(readFileSync(p).equals(before)).toBe(true);
    expect((await cli("synth", "--out", p, "--shape", "tiny", "--type", "q4_0", "--tokenizer", "bytes", "--force")).code).toBe(0);
    expect(readFileSync(p).equals(before)).toBe(false);
    expect((await cli("quantize", p, p + ".q8", "--type", "q8_0")).code).toBe(0);
    expect((await cli("quantize", p, p + ".q8", "--type", "q8_0")).err).toMatch(/exists: --force overwrites it/);
    // the shipped profile is named as such, before any work is done
    const shipped = await cli("profile");
    expect(shipped.code).toBe(2);
    expect(shipped.err).toMatch(/neuronpipe-default\.gguf\.profile\.gguf exists and ships with neuronpipe/);
    expect((await cli("train-predictor")).err).toMatch(/neuronpipe-default\.gguf\.predictor\.gguf exists and ships with neuronpipe/);
    // a share of every neuron leaves no hot group: refused before any work
    const share = await cli("train-predictor", "--out", join(dir, "cold.predictor.gguf"), "--cold-share", "1");
    expect([share.code, share.err.trim()]).toEqual([2, 'neuronpipe train-predictor: --cold-share must be a number from 0 to 0.99, got "1"\n(`neuronpipe train-predictor --help` lists the options)']);
  });

  it("quantize re-encodes an f32 model into the bytes synth writes for that type directly", async () => {
    const shape = ["--embd", "64", "--ff", "96", "--layers", "1", "--heads", "2"];
    const f32 = join(dir, "q-f32.gguf");
    const direct = join(dir, "q-direct.gguf");
    const requant = join(dir, "q-requant.gguf");
    await cli("synth", "--out", f32, ...shape, "--type", "f32", "--seed", "3");
    await cli("synth", "--out", direct, ...shape, "--type", "q4_0", "--seed", "3");
    expect((await cli("quantize", f32, requant, "--type", "q4_0")).code).toBe(0);
    const a = readGGUF(direct);
    const b = readGGUF(requant);
    const bytesA = readFileSync(direct);
    const bytesB = readFileSync(requant);
    for (const t of a.tensors) {
      const u = b.tensorsByName.get(t.name)!;
      expect([u.type, u.ne]).toEqual([t.type, t.ne]);
      expect(bytesB.subarray(u.offset, u.offset + u.nbytes).equals(bytesA.subarray(t.offset, t.offset + t.nbytes))).toBe(true);
    }
    expect(b.metadata.get("general.file_type")?.value).toBe(2);
  });

  it("bad input gets a clear message and a non-zero exit code", async () => {
    expect((await cli("frobnicate")).err).toMatch(/unknown command "frobnicate"/);
    const bad = await cli("generate", "--model", join(dir, "nope.gguf"));
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/nope\.gguf: cannot open/);
    const t = await cli("generate", "--model", join(dir, "nope.gguf"), "--max-tokens", "lots");
    expect(t.code).toBe(2);
    expect(t.err).toMatch(/--max-tokens must be a whole number/);
    expect((await cli("synth", "--out", join(dir, "x.gguf"), "--shape", "huge")).err).toMatch(/unknown shape "huge"/);
    expect((await cli("synth", "--out", join(dir, "x.gguf"), "--type", "q5_k")).err).toMatch(/unknown weight type "q5_k"/);
    const rankAlone = await cli("synth", "--out", join(dir, "x.gguf"), "--gate-rank", "8");
    expect(rankAlone.code).toBe(2);
    expect(rankAlone.err).toMatch(/--gate-rank plants sparsity: it needs --active-fraction/);
    const groupsAlone = await cli("synth", "--out", join(dir, "x.gguf"), "--activation", "reglu", "--active-fraction", "0.1", "--cofire-group", "8");
    expect(groupsAlone.code).toBe(1);
    expect(groupsAlone.err).toMatch(/co-firing groups act through the low-rank gate structure: give a gate rank too/);
    const shareAlone = await cli("synth", "--out", join(dir, "x.gguf"), "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "8", "--cofire-share", "0.5");
    expect(shareAlone.code).toBe(2);
    expect(shareAlone.err).toMatch(/--cofire-share shapes the groups of --cofire-group: give both/);
    expect((await cli("synth", "--out", join(dir, "x.gguf"), "--activation", "reglu", "--active-fraction", "0.1", "--gate-rank", "8", "--cofire-group", "4", "--cofire-share", "1.5")).err).toMatch(/--cofire-share must be a number from 0 to 1/);
    expect(existsSync(join(dir, "x.gguf"))).toBe(false); // nothing written
    expect((await cli("inspect", join(dir, "x.gguf"))).err).toMatch(/cannot open/);
  });
});
