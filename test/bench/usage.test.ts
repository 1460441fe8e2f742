// Every bench script answers --help with its usage (its header comment) and exits 0 without
// running anything; an unknown option is refused in one line naming it, exit 2. Reference: the
// script's own text.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const bench = join(import.meta.dirname, "..", "..", "bench");
const scripts = readdirSync(bench).filter((f) => f.endsWith(".js"));

describe.each(scripts)("bench/%s", (script) => {
  it("--help prints its header comment's usage and exits 0", () => {
    const r = spawnSync(process.execPath, [join(bench, script), "--help"], { encoding: "utf8", timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    // the header's first line of prose, without its comment marker, and the invocation it documents
    const second = readFileSync(join(bench, script), "utf8").split("\n")[1]!;
    expect(second.startsWith("// ")).toBe(true);
    expect(r.stdout.split("\n")[0]).toBe(second.slice(3));
    expect(r.stdout).toContain(`node bench/${script}`);
    expect(r.stdout).not.toMatch(/^\/\//m);
  });

  it("refuses an unknown option by name", () => {
    const r = spawnSync(process.execPath, [join(bench, script), "--no-such-option"], { encoding: "utf8", timeout: 60_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(`${script}: Unknown option '--no-such-option' (--help lists the options)\n`);
  });
});
