// End-to-end: headless Chromium (Debian's, through playwright-core) opens the inspector page
// while the mini actor system runs, and reads the live rows.
import { copyFileSync, existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AnyActorRef } from "xstate";
import { startInspector, type Inspector } from "../../src/inspect/server.js";
import { startMiniSystem } from "./mini-system.js";

const CHROMIUM = "/usr/bin/chromium";

let dir: string;
let context: BrowserContext;
let inspector: Inspector;
let system: AnyActorRef | undefined;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "neuronpipe-inspect-"));
});

/** Launched inside the test, so that a missing browser fails the test (it is not skipped). */
async function launchChromium(): Promise<BrowserContext> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium not found at ${CHROMIUM}: the inspector page test needs it (run \`apt-get install chromium\`)`);
  }
  // A fresh profile; the flags keep Chromium from reaching for the network (see shared/reference/machine.md).
  return chromium.launchPersistentContext(join(dir, "profile"), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

afterAll(async () => {
  system?.stop();
  await context?.close();
  await inspector?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** data-state of the token machine's row: the live one, else the most recently ended. */
const tokenState = (page: Page) => page.getAttribute('#actors tr[data-actor="token"]', "data-state");

describe("inspector page in Chromium", () => {
  it("shows the live actors, their states and context, and updates them", async () => {
    context = await launchChromium();
    inspector = await startInspector({ title: "neuronpipe mini pipeline" });
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on("pageerror", (err) => pageErrors.push(String(err)));
    page.on("console", (msg) => {
      if (msg.type() === "error") pageErrors.push(msg.text());
    });
    await page.goto(inspector.url);
    await page.waitForSelector('#conn[data-conn="open"]', { timeout: 10_000 });

    system = startMiniSystem(inspector.inspect);
    await page.waitForSelector('#actors tr[data-actor="io-loader"]', { timeout: 10_000 });
    await page.waitForSelector('#actors tr[data-actor="compute:big"]', { timeout: 10_000 });
    await page.waitForSelector('#actors tr[data-actor="token"]', { timeout: 10_000 });

    const root = page.locator('#actors tr[data-actor="pipeline"]');
    await expect.poll(() => root.getAttribute("data-state")).toBe("decoding");
    expect(await root.getAttribute("data-status")).toBe("active");
    expect(await page.locator('#actors tr[data-actor="io-loader"]').getAttribute("data-state")).toMatch(/^(idle|reading)$/);
    expect(await page.locator('#actors tr[data-actor="compute:big"] td').nth(1).textContent()).toBe("pipeline");

    // The token machine moves on: its state differs between two moments.
    const first = await tokenState(page);
    expect(first).toMatch(/^(front|reads|back|logits|done)$/);
    await page.waitForFunction(
      (before) => document.querySelector('#actors tr[data-actor="token"]')?.getAttribute("data-state") !== before,
      first,
      { timeout: 10_000 },
    );
    const second = await tokenState(page);
    expect(second).not.toBe(first);
    expect(second).toMatch(/^(front|reads|back|logits|done)$/);

    // Context scalars are shown; ended tokens are greyed and bounded.
    await page.waitForSelector('#actors tr[data-actor="token"] .ctx span[data-key="layer"]');
    await page.waitForSelector('#actors tr[data-actor="pipeline"] .ctx span[data-key="token"]');
    await page.waitForSelector('#actors tr.ended[data-actor="token"][data-status="done"]');
    await page.waitForFunction(() => document.querySelectorAll('#actors tr[data-actor="token"]').length >= 10, undefined, { timeout: 10_000 });
    await page.waitForSelector("#events tbody tr");
    const text = await page.textContent("body");
    for (const name of ["pipeline", "io-loader", "compute:big", "token", "READ", "COMPUTE"]) expect(text).toContain(name);
    await expect.poll(() => page.textContent("#eps"), { timeout: 5_000 }).not.toBe("0");

    const png = join(dir, "inspector.png");
    await page.screenshot({ path: png, fullPage: true });
    expect(statSync(png).size).toBeGreaterThan(10_000);
    if (process.env.INSPECT_SCREENSHOT) copyFileSync(png, process.env.INSPECT_SCREENSHOT); // to look at it

    // A page opened mid-run shows every live actor at once (the server replays them).
    const late = await context.newPage();
    await late.goto(inspector.url);
    await late.waitForSelector('#actors tr[data-actor="io-loader"]', { timeout: 5_000 });
    await late.waitForSelector('#actors tr[data-actor="compute:big"]', { timeout: 5_000 });
    expect(await late.locator('#actors tr[data-actor="pipeline"]').getAttribute("data-state")).toBe("decoding");
    expect(await late.locator("#actors tr.ended").count()).toBeLessThanOrEqual(20);

    expect(pageErrors).toEqual([]);
    console.log(`inspector page screenshot: ${png} (${statSync(png).size} bytes); token states seen: ${first} → ${second}`);
  }, 60_000);
});
