// The layering rules (.dependency-cruiser.cjs, run by `npm test` as check:deps) hold on the tree,
// and they catch what they are for: an import cycle and an import from a layer above, planted in
// a throwaway tree of the same shape.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { cruise, type IConfiguration, type IReporterOutput } from "dependency-cruiser";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const config = createRequire(import.meta.url)(join(root, ".dependency-cruiser.cjs")) as IConfiguration;
const scratch = mkdtempSync(join(tmpdir(), "np-deps-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

async function violations(baseDir: string, paths: string[]): Promise<{ rule: string; from: string; to: string }[]> {
  const { output } = (await cruise(paths, { ruleSet: { forbidden: config.forbidden }, ...config.options, baseDir, tsConfig: undefined, validate: true })) as IReporterOutput & {
    output: { summary: { violations: { rule: { name: string }; from: string; to: string }[] } };
  };
  return output.summary.violations.map((v) => ({ rule: v.rule.name, from: v.from, to: v.to }));
}

function tree(files: Record<string, string>): string {
  const dir = mkdtempSync(join(scratch, "tree-"));
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

describe("dependency check", () => {
  it("passes on the tree: no cycle, no import from a layer above", async () => {
    expect(await violations(root, ["src", "actors", "workers"])).toEqual([]);
  }, 60_000);

  it("fails on a deliberate import cycle", async () => {
    const dir = tree({
      "src/model/a.ts": 'import { b } from "./b.js";\nexport const a = () => b;\n',
      "src/model/b.ts": 'import { a } from "./a.js";\nexport const b = () => a;\n',
    });
    const v = await violations(dir, ["src"]);
    expect(v.map((x) => x.rule)).toContain("no-circular");
    expect(v.find((x) => x.rule === "no-circular")?.from).toMatch(/src\/model\/[ab]\.ts/);
  });

  it("fails on an import from a layer above (the model importing the library's Session)", async () => {
    const dir = tree({
      "src/model/forward.ts": 'import { Session } from "../api/session.js";\nexport const f = () => Session;\n',
      "src/api/session.ts": "export class Session {}\n",
    });
    expect(await violations(dir, ["src"])).toEqual([{ rule: "layer-model-imports-above", from: "src/model/forward.ts", to: "src/api/session.ts" }]);
  });
});
