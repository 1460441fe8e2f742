// neuronpipe convert: a GGUF from the trainer's export (tools/train/out).
import { weightTypeIds } from "../../tools/synth/synth.js";
import { convertTrainerExport } from "../../tools/convert/from-trainer.js";
import { formatBytes } from "../../util/bytes.js";
import { checkOverwrite, forceHelp, forceOption, UsageError, type Command } from "../command.js";
import { progressBar } from "../progress.js";

export const convert: Command = {
  summary: "write a GGUF from the trainer's export (tools/train/out)",
  usage: "neuronpipe convert DIR --out PATH [--arch smallthinker|llama] [--type f32]",
  options: { out: { type: "string", short: "o" }, ...forceOption, arch: { type: "string" }, type: { type: "string" }, help: { type: "boolean", short: "h" } },
  help: {
    out: "output GGUF path",
    ...forceHelp,
    arch: "smallthinker (default: one-expert ReGLU that llama.cpp also runs) or llama (+ neuronpipe.ffn_activation)",
    type: "weight type: f32 (default), f16, q8_0, q4_0",
  },
  async run(v, pos) {
    const dir = pos[0];
    const out = v.out as string | undefined;
    if (!dir || !out) throw new UsageError("convert needs the export directory and --out PATH");
    checkOverwrite(out, v);
    const arch = (v.arch as string | undefined) ?? "smallthinker";
    if (arch !== "smallthinker" && arch !== "llama") throw new UsageError("--arch must be smallthinker or llama");
    const t = weightTypeIds[((v.type as string | undefined) ?? "f32").toLowerCase()];
    if (t === undefined) throw new UsageError(`--type must be f32, f16, q8_0 or q4_0`);
    const bytes = await convertTrainerExport(dir, { arch, type: t }).write(out, { onProgress: progressBar(`writing ${out}`) });
    process.stderr.write(`wrote ${out}: ${formatBytes(bytes)}\n`);
  },
};
