// The `neuronpipe` command line: one file per command in commands/, this file dispatches.
// Every command has --help.
import { parseArgs } from "node:util";
import { packageVersion as version } from "../util/package-files.js";
import { UsageError, type Command, type CommandIO } from "./command.js";
import { bench } from "./commands/bench.js";
import { chat } from "./commands/chat.js";
import { convert } from "./commands/convert.js";
import { evaluate } from "./commands/eval.js";
import { generate } from "./commands/generate.js";
import { inspect } from "./commands/inspect.js";
import { machine } from "./commands/machine.js";
import { pack } from "./commands/pack.js";
import { probe } from "./commands/probe.js";
import { plan } from "./commands/plan.js";
import { profile } from "./commands/profile.js";
import { quantize } from "./commands/quantize.js";
import { serve } from "./commands/serve.js";
import { synth } from "./commands/synth.js";
import { traceCommand } from "./commands/trace.js";
import { trainPredictor } from "./commands/train-predictor.js";

export { defaultModelPath } from "./model-flags.js";

const commands: Record<string, Command> = {
  generate,
  chat,
  serve,
  bench,
  inspect,
  synth,
  trace: traceCommand,
  quantize,
  convert,
  eval: evaluate,
  profile,
  "train-predictor": trainPredictor,
  pack,
  machine,
  probe,
  plan,
};

function helpText(name: string, c: Command): string {
  const lines = [`neuronpipe ${name} — ${c.summary}`, "", `usage: ${c.usage}`, "", "options:"];
  for (const [k, o] of Object.entries(c.options)) {
    if (k === "help") continue;
    const flag = `${o.short ? `-${o.short}, ` : "    "}--${k}${o.type === "string" ? " VALUE" : ""}`;
    lines.push(`  ${flag.padEnd(28)} ${c.help[k] ?? ""}`);
  }
  lines.push(`  ${"-h, --help".padEnd(28)} this help`);
  return lines.join("\n") + "\n";
}

function mainHelp(): string {
  const lines = ["neuronpipe — run LLMs bigger than memory, fast, by exploiting activation sparsity", "", "usage: neuronpipe COMMAND [options]", "", "commands:"];
  for (const [k, c] of Object.entries(commands)) lines.push(`  ${k.padEnd(10)} ${c.summary}`);
  lines.push("", "`neuronpipe COMMAND --help` describes a command's options.");
  return lines.join("\n") + "\n";
}

/** Options whose value may be left out (`--inspect` alone means `--inspect ""`: the default port). */
const OPTIONAL_VALUE = new Set(["--inspect"]);

function withOptionalValues(args: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    out.push(a);
    if (OPTIONAL_VALUE.has(a) && (i + 1 >= args.length || args[i + 1]!.startsWith("-") || !/^\d+$/.test(args[i + 1]!))) out.push("");
  }
  return out;
}

/** node:util parseArgs's messages, shortened to what the user typed. */
function parseError(err: Error & { code?: string }): string {
  const opt = /'(-[^']*)'/.exec(err.message)?.[1];
  if (err.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && opt) return `unknown option ${opt}`;
  if (err.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && opt) return /argument missing/.test(err.message) ? `${opt} needs a value` : `${opt} takes no value`;
  if (err.code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL") return `unexpected argument: ${err.message.replace(/^Unexpected argument '([^']*)'.*$/s, "$1")}`;
  return err.message.split("\n")[0]!;
}

/** Runs `neuronpipe ARGV…`; returns the exit code. `io.stdin` lets a command read a piped prompt. */
export async function main(argv: string[], io: CommandIO = {}): Promise<number> {
  const [name, ...given] = argv;
  const rest = withOptionalValues(given);
  if (name === "--version" || name === "-v" || name === "version") {
    process.stdout.write(`neuronpipe ${version()}\n`);
    return 0;
  }
  if (!name || name === "--help" || name === "-h" || name === "help") {
    process.stdout.write(mainHelp());
    return name ? 0 : 1;
  }
  const cmd = commands[name];
  if (!cmd) {
    const near = Object.keys(commands).find((k) => k.startsWith(name.slice(0, 3)));
    process.stderr.write(`neuronpipe: unknown command "${name}"${near ? ` (did you mean ${near}?)` : ""}; \`neuronpipe --help\` lists the commands\n`);
    return 2;
  }
  try {
    if (given.includes("--version")) {
      process.stdout.write(`neuronpipe ${version()}\n`);
      return 0;
    }
    const { values, positionals } = parseArgs({ args: rest, options: cmd.options, allowPositionals: true, strict: true });
    if (values.help) {
      process.stdout.write(helpText(name, cmd));
      return 0;
    }
    return (await cmd.run(values as Record<string, string | boolean | string[] | undefined>, positionals, io)) ?? 0;
  } catch (e) {
    const err = e as Error & { code?: string };
    const parse = err.code?.startsWith("ERR_PARSE_ARGS") ?? false;
    const usage = e instanceof UsageError || parse;
    const message = parse ? parseError(err) : err.message;
    // one line and a hint, not the whole help
    process.stderr.write(`neuronpipe ${name}: ${message}\n${usage ? `(\`neuronpipe ${name} --help\` lists the options)\n` : ""}`);
    return usage ? 2 : 1;
  }
}

