// The bench scripts' command line: their options parsed strictly, a bad one refused in one line,
// and `--help` answered with the script's header comment (its usage, kept in one place).
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

/** Print the script's leading comment block (after the shebang) without its `//`, and exit 0. */
export function printUsage(scriptUrl) {
  const lines = readFileSync(fileURLToPath(scriptUrl), "utf8").split("\n");
  const usage = [];
  for (const l of lines.slice(lines[0]?.startsWith("#!") ? 1 : 0)) {
    if (!l.startsWith("//")) break;
    usage.push(l.replace(/^\/\/ ?/, ""));
  }
  process.stdout.write(usage.join("\n") + "\n");
  process.exit(0);
}

/** parseArgs' { values } for `options` plus --help/-h; a bad command line exits 2 with one line naming it. */
export function benchArgs(scriptUrl, options) {
  let parsed;
  try {
    parsed = parseArgs({ options: { ...options, help: { type: "boolean", short: "h", default: false } } });
  } catch (e) {
    process.stderr.write(`${basename(fileURLToPath(scriptUrl))}: ${e?.message ?? e} (--help lists the options)\n`);
    process.exit(2);
  }
  if (parsed.values.help) printUsage(scriptUrl);
  return parsed;
}
