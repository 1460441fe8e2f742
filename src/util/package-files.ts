// Files that ship with the package (models/, the built worker entry points), found from any
// module of it — run from sources (tests) or from dist/ — by walking up to its package.json.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

let root: string | undefined;

/** The folder holding neuronpipe's package.json. */
export function packageRoot(): string {
  if (root) return root;
  for (let d = dirname(fileURLToPath(import.meta.url)); ; d = dirname(d)) {
    const p = join(d, "package.json");
    if (existsSync(p) && (JSON.parse(readFileSync(p, "utf8")) as { name?: string }).name === "neuronpipe") return (root = d);
    if (dirname(d) === d) throw new Error("neuronpipe: cannot find the package's package.json above " + fileURLToPath(import.meta.url));
  }
}

/** A built worker entry point (dist/workers/NAME.js): workers run as JavaScript even when the caller runs from sources. */
export function workerFile(name: string): string {
  const p = join(packageRoot(), "dist", "workers", `${name}.js`);
  if (!existsSync(p)) throw new Error(`neuronpipe: dist/workers/${name}.js missing; run \`npm run build:ts\``);
  return p;
}

/** A file shipped in the package's models/ folder. */
export function shippedFile(name: string): string {
  const p = join(packageRoot(), "models", name);
  if (!existsSync(p)) throw new Error(`models/${name} is missing from this installation`);
  return p;
}

/** The package's version, from its package.json. */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8")) as { version: string }).version;
}
