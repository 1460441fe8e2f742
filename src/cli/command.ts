// What a CLI command is: its options (node:util parseArgs), their help, and what it runs.
import { existsSync, fstatSync, readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { packageRoot } from "../util/package-files.js";
import type { ParseArgsConfig } from "node:util";

export type Options = NonNullable<ParseArgsConfig["options"]>;
export type Values = Record<string, string | boolean | string[] | undefined>;

/** What a command may read besides its arguments: the terminal's stdin (bin/neuronpipe.js passes it; tests leave it out). */
export interface CommandIO {
  stdin?: NodeJS.ReadStream;
}

/** The native thread pool's limit (native/src/threads.h kMaxThreads). */
export const MAX_THREADS = 64;

export interface Command {
  summary: string;
  usage: string;
  options: Options;
  help: Record<string, string>;
  /** Runs the command; a number is the exit code (default 0). */
  run(values: Values, positionals: string[], io: CommandIO): Promise<void | number>;
}

/** A mistake in the command line (exit code 2; a hint to `--help` follows the message). */
export class UsageError extends Error {}

/** The number an option holds, checked: `--name must be a whole number ≥ min, got "…"`. */
export function num(v: unknown, name: string, { int = false, min = -Infinity, max = Infinity } = {}): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || (int && !Number.isInteger(n)) || n < min || n > max) {
    const range = max < Infinity ? ` from ${min} to ${max}` : min > -Infinity ? ` ≥ ${min}` : "";
    throw new UsageError(`--${name} must be ${int ? "a whole number" : "a number"}${range}, got "${v}"`);
  }
  return n;
}

/** The value of an option that has two names (`--temp` / `--temperature`); both given is a mistake. */
export function oneOf(v: Values, a: string, b: string): string | undefined {
  if (v[a] !== undefined && v[b] !== undefined) throw new UsageError(`--${a} and --${b} are the same option: give one of them`);
  return (v[a] ?? v[b]) as string | undefined;
}

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(typeof c === "string" ? Buffer.from(c) : (c as Buffer));
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * The prompt of a command that takes one, as llama.cpp: `--prompt TEXT`, `--prompt -` (stdin),
 * `--file PATH` (`-` = stdin), else stdin when it is a pipe, a socket or a file, else `fallback`.
 */
export async function readPrompt(v: Values, io: CommandIO, fallback = "The sea"): Promise<string> {
  if (v.prompt !== undefined && v.file !== undefined) throw new UsageError("--prompt and --file both give the prompt: give one of them");
  const stdin = () => io.stdin ?? process.stdin;
  if (v.prompt === "-" || v.file === "-") return readAll(stdin());
  if (typeof v.prompt === "string") return v.prompt;
  if (typeof v.file === "string") {
    try {
      return readFileSync(v.file, "utf8");
    } catch (e) {
      throw new UsageError(`--file ${v.file}: cannot read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
  }
  if (io.stdin && !io.stdin.isTTY) {
    let piped = false;
    try {
      const st = fstatSync(0);
      piped = st.isFIFO() || st.isFile() || st.isSocket(); // a shell pipe is a FIFO; a spawned child's, a socket
    } catch {
      piped = false;
    }
    if (piped) {
      const text = await readAll(io.stdin);
      if (text.length > 0) return text;
    }
  }
  return fallback;
}

/** The `--force` option of a command that writes a file. */
export const forceOption = { force: { type: "boolean" as const } };
export const forceHelp = { force: "overwrite the output file if it exists" };

/**
 * Refuse to overwrite an existing file unless `--force` (a file shipped with neuronpipe is named as
 * such: the default model's profile and predictors are what its tests and benchmarks are measured
 * with). Called before any work, so a refusal costs nothing.
 */
export function checkOverwrite(path: string, v: Values, flag = "--out"): void {
  if (v.force || !existsSync(path)) return;
  let shipped = false;
  try {
    shipped = dirname(realpathSync(path)) === realpathSync(join(packageRoot(), "models"));
  } catch {
    shipped = false;
  }
  throw new UsageError(`${path} exists${shipped ? " and ships with neuronpipe (the default model's files)" : ""}: --force overwrites it, ${flag} PATH writes elsewhere`);
}
