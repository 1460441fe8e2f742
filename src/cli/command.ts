// What a CLI command is: its options (node:util parseArgs), their help, and what it runs.
import type { ParseArgsConfig } from "node:util";

export type Options = NonNullable<ParseArgsConfig["options"]>;
export type Values = Record<string, string | boolean | undefined>;

export interface Command {
  summary: string;
  usage: string;
  options: Options;
  help: Record<string, string>;
  /** Runs the command; a number is the exit code (default 0). */
  run(values: Values, positionals: string[]): Promise<void | number>;
}

/** A mistake in the command line (the help follows the message, unless the message says all there is to say). */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly showHelp = true,
  ) {
    super(message);
  }
}

/** The number an option holds, checked: `--name must be a whole number ≥ min, got "…"`. */
export function num(v: unknown, name: string, { int = false, min = -Infinity } = {}): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || (int && !Number.isInteger(n)) || n < min) {
    throw new UsageError(`--${name} must be ${int ? "a whole number" : "a number"}${min > -Infinity ? ` ≥ ${min}` : ""}, got "${v}"`);
  }
  return n;
}
