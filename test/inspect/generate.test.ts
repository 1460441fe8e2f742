// The live inspector on a real generation: `neuronpipe generate --inspect` on the default pack
// with the pipeline decoder serves the page; headless Chromium (Debian's, through
// playwright-core) opens it and sees the token machine, the I/O loader and the compute worker,
// with states that change while the model decodes; a screenshot is saved and checked. And the
// library's `inspect` option: an observer that throws leaves the session usable.
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../../src/api/model.js";
import { budgetForFfnFraction, planOptions } from "../../src/sparse/memory-plan.js";
import { openPack } from "../../src/sparse/pack/open.js";
import { writePack } from "../../src/sparse/pack/write.js";

const CHROMIUM = "/usr/bin/chromium";
const root = join(import.meta.dirname, "..", "..");
const defaultModel = join(root, "models", "neuronpipe-default.gguf");
const dir = mkdtempSync(join(tmpdir(), "np-inspect-gen-"));
const packPath = join(dir, "default.pack.gguf");
let context: BrowserContext | undefined;

beforeAll(async () => {
  await writePack(defaultModel, packPath, { profile: `${defaultModel}.profile.gguf`, predictor: `${defaultModel}.predictor.gguf` });
}, 120_000);
afterAll(async () => {
  await context?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("neuronpipe generate --inspect", () => {
  it("serves a page that shows the pipeline's actors changing state while it decodes, in Chromium", async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`Chromium not found at ${CHROMIUM}: this test needs it (run \`apt-get install chromium\`)`);
    const pack = openPack(packPath);
    const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: 256, predictor: true }));
    const cli = spawn(
      process.execPath,
      [join(root, "bin", "neuronpipe.js"), "generate", "--model", packPath, "--decoder", "pipeline", "--memory", String(memory), "--pin-gates", "off", "--max-tokens", "240", "--temperature", "0", "--inspect", "0", "--prompt", "The whale"],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let stderr = "";
    cli.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((res) => cli.on("exit", (code) => res(code)));
    try {
      const url = await new Promise<string>((res, rej) => {
        const t = setTimeout(() => rej(new Error(`no inspector URL within 30 s; stderr: ${stderr}`)), 30_000);
        cli.stderr.on("data", () => {
          const m = /inspector: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(stderr);
          if (m) {
            clearTimeout(t);
            res(m[1]!);
          }
        });
      });
      context = await chromium.launchPersistentContext(join(dir, "profile"), {
        executablePath: CHROMIUM,
        headless: true,
        viewport: { width: 1280, height: 900 },
        args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
      });
      const page = await context.newPage();
      const pageErrors: string[] = [];
      page.on("pageerror", (err) => pageErrors.push(String(err)));
      await page.goto(url); // the generation starts once this page is connected
      for (const actor of ["token", "io-loader", "compute:big"]) await page.waitForSelector(`#actors tr[data-actor="${actor}"]`, { timeout: 20_000 });
      // the token machine and the compute worker change state while the model decodes
      const seen = { token: new Set<string>(), "compute:big": new Set<string>(), "io-loader": new Set<string>() };
      const t0 = Date.now();
      while (Date.now() - t0 < 20_000 && (seen.token.size < 2 || seen["compute:big"].size < 2)) {
        for (const actor of Object.keys(seen) as (keyof typeof seen)[]) {
          const s = await page.getAttribute(`#actors tr[data-actor="${actor}"]`, "data-state");
          if (s) seen[actor].add(s);
        }
      }
      expect(seen.token.size, `token states ${[...seen.token]}`).toBeGreaterThanOrEqual(2);
      expect(seen["compute:big"].size, `compute states ${[...seen["compute:big"]]}`).toBeGreaterThanOrEqual(2);
      for (const s of seen.token) expect(s).toMatch(/^(front|reads|ffn|logits|done|nextLayer)$/);
      for (const s of seen["compute:big"]) expect(s).toMatch(/^(idle|busy|initialising)$/);
      for (const s of seen["io-loader"]) expect(s).toMatch(/^(idle|reading)$/);
      const png = join(dir, "inspector.png");
      await page.screenshot({ path: png, fullPage: true });
      expect(statSync(png).size).toBeGreaterThan(10_000);
      if (process.env.INSPECT_SCREENSHOT) copyFileSync(png, process.env.INSPECT_SCREENSHOT); // to look at it
      const text = (await page.textContent("body")) ?? "";
      for (const name of ["token", "io-loader", "compute:big", "pipeline", "session"]) expect(text).toContain(name);
      expect(pageErrors).toEqual([]);
      console.log(`inspector on a real generation: token states ${[...seen.token].join(", ")}; compute ${[...seen["compute:big"]].join(", ")}; screenshot ${png} (${statSync(png).size} bytes)`);
      // the run ends; the page stays served until Ctrl-C
      await new Promise<void>((res) => {
        const check = () => (/inspector keeps serving/.test(stderr) ? res() : setTimeout(check, 100));
        check();
      });
      cli.kill("SIGINT");
      expect(await exited).toBe(0);
    } finally {
      cli.kill("SIGKILL");
    }
  }, 120_000);
});

it("an inspect observer that throws leaves the session usable (a warning, the same tokens)", async () => {
  const pack = openPack(packPath);
  const memory = budgetForFfnFraction(pack, 0.5, planOptions(pack.config, { contextSize: 128, predictor: true }));
  const m = await loadModel(packPath, { memory, decoder: "pipeline", contextSize: 128 });
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.message);
  process.on("warning", onWarning);
  try {
    const s = m.createSession();
    const run = async (inspect?: () => void) => {
      const ids: number[] = [];
      for await (const p of s.generate("The whale", { maxTokens: 16, temperature: 0, inspect })) if (p.token >= 0) ids.push(p.token);
      s.reset();
      return ids;
    };
    const reference = await run();
    const thrown = await run(() => {
      throw new Error("observer bug");
    });
    expect(thrown).toEqual(reference); // the generation ran to the end
    expect(await run()).toEqual(reference); // and the session is not stuck "already generating"
    await new Promise((r) => setImmediate(r));
    expect(warnings.filter((w) => /inspect observer threw .*observer bug/.test(w))).toHaveLength(1);
    s.dispose();
  } finally {
    process.off("warning", onWarning);
    await m[Symbol.asyncDispose]();
  }
}, 60_000);
