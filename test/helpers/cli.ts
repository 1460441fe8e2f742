// Run the CLI's main(argv) in this process, capturing what it prints; `env` is set for the call
// only (a variable given as undefined is unset meanwhile).
import type { CommandIO } from "../../src/cli/command.js";
import { main } from "../../src/cli/main.js";

export async function runCli(argv: string[], env: Record<string, string | undefined> = {}, io: CommandIO = {}): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const ow = process.stdout.write.bind(process.stdout);
  const ew = process.stderr.write.bind(process.stderr);
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  const set = (vars: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(vars)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  process.stdout.write = ((s: string) => ((out += s), true)) as typeof process.stdout.write;
  process.stderr.write = ((s: string) => ((err += s), true)) as typeof process.stderr.write;
  set(env);
  try {
    return { code: await main(argv, io), out, err };
  } finally {
    process.stdout.write = ow;
    process.stderr.write = ew;
    set(saved);
  }
}
