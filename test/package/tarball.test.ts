// The package as a user gets it: `npm pack`'s tarball installed into an empty project with an
// empty HOME (no ~/.npmrc, so no `nodedir`; no ~/.cmake-js) and no network: npm offline (the
// packages it depends on come from the npm cache, primed first by an install that runs no
// scripts) and HTTP(S) proxied to a closed port, so nothing — cmake-js included — can download
// Node's headers. The install compiles the addon, `npx neuronpipe generate` prints what this
// checkout prints, and the library imports as ESM from JavaScript and type-checks from TypeScript.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli.js";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "np-tarball-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const npmCache = execFileSync("npm", ["config", "get", "cache"], { cwd: root, encoding: "utf8" }).trim();
const home = join(dir, "home");
const app = join(dir, "app");
const base = { PATH: process.env.PATH, HOME: home, npm_config_cache: npmCache, npm_config_update_notifier: "false", npm_config_audit: "false", npm_config_fund: "false" };
const dead = "http://127.0.0.1:9"; // the discard port: nothing listens
const env = { ...base, npm_config_offline: "true", http_proxy: dead, https_proxy: dead, HTTP_PROXY: dead, HTTPS_PROXY: dead, npm_config_proxy: dead, npm_config_https_proxy: dead };
const run = (cmd: string, args: string[], cwd = app, e: NodeJS.ProcessEnv = env) =>
  execFileSync(cmd, args, { cwd, env: e, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 * 2 ** 20 });

describe("the npm package", () => {
  it("installs from its tarball offline with an empty HOME; npx neuronpipe and import 'neuronpipe' work", async () => {
    mkdirSync(home);
    mkdirSync(app);
    // dist/ is already built (npm test's pretest): pack without re-running the build under other tests' feet
    execFileSync("npm", ["pack", "--ignore-scripts", "--pack-destination", dir], { cwd: root, stdio: "ignore" });
    const tarball = join(dir, readdirSync(dir).find((f) => f.endsWith(".tgz"))!);
    const types = "@types/node@20.19.9";
    // prime the npm cache with what the package depends on (the only step that may use the registry)
    const prime = join(dir, "prime");
    mkdirSync(prime);
    writeFileSync(join(prime, "package.json"), JSON.stringify({ name: "prime", version: "1.0.0", private: true }));
    run("npm", ["install", "--prefer-offline", "--ignore-scripts", tarball, types], prime, base);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true, type: "module" }));
    run("npm", ["install", tarball, types]);

    // the CLI from the installed package, against this checkout's (greedy: the same tokens)
    const installed = run("npx", ["--no-install", "neuronpipe", "generate", "-p", "The whale", "-n", "12", "--temp", "0", "--json"]);
    const here = await runCli(["generate", "-p", "The whale", "-n", "12", "--temp", "0", "--json"]);
    expect(JSON.parse(installed).tokens).toEqual(JSON.parse(here.out).tokens);
    expect(run("npx", ["--no-install", "neuronpipe", "--version"]).trim()).toMatch(/^neuronpipe \d+\.\d+\.\d+$/);

    // ESM from JavaScript
    writeFileSync(
      join(app, "main.js"),
      `import { loadModel, defaultModelPath } from "neuronpipe";
const model = await loadModel(defaultModelPath());
const session = model.createSession();
let text = "";
for await (const piece of session.generate("The whale", { maxTokens: 12, temperature: 0 })) text += piece.text;
session.dispose();
model.dispose();
console.log(JSON.stringify(text));
`,
    );
    expect(JSON.parse(run("node", ["main.js"]))).toBe(JSON.parse(here.out).text);

    // TypeScript: the public types resolve through the package's exports
    writeFileSync(
      join(app, "main.ts"),
      `import { loadModel, defaultModelPath, ChatSession, type GenerateOptions, type StopReason, type TraceRecorder, type PipelineOptions, type PredictorMode, type ServerOptions } from "neuronpipe";
const options: GenerateOptions = { maxTokens: 4, stop: ["."] };
const reason: StopReason = "stop-sequence";
const model = await loadModel(defaultModelPath(), { decoder: "inline" });
const chat = new ChatSession(model);
export type Used = [TraceRecorder, PipelineOptions, PredictorMode, ServerOptions, typeof options, typeof reason, typeof chat];
`,
    );
    writeFileSync(join(app, "tsconfig.json"), JSON.stringify({ compilerOptions: { module: "nodenext", moduleResolution: "nodenext", target: "es2022", strict: true, noEmit: true, skipLibCheck: false } }));
    execFileSync(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "."], { cwd: app, env, encoding: "utf8" });
  }, 600_000);
});
