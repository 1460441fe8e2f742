// neuronpipe quantize: re-encode a GGUF's weight matrices.
import { weightTypeIds } from "../../tools/synth/synth.js";
import { requantize } from "../../tools/convert/requantize.js";
import { formatBytes } from "../../util/bytes.js";
import { checkOverwrite, forceHelp, forceOption, UsageError, type Command } from "../command.js";
import { progressBar } from "../progress.js";

export const quantize: Command = {
  summary: "re-encode a GGUF's weight matrices as f32, f16, q8_0 or q4_0",
  usage: "neuronpipe quantize INPUT OUTPUT --type q4_0",
  options: { type: { type: "string" }, ...forceOption, help: { type: "boolean", short: "h" } },
  help: { type: "target type: f32, f16, q8_0, q4_0 (norms stay f32)", ...forceHelp },
  async run(v, pos) {
    const [input, output] = pos;
    if (!input || !output) throw new UsageError("quantize needs INPUT and OUTPUT paths");
    checkOverwrite(output, v, "another OUTPUT:");
    const t = weightTypeIds[((v.type as string | undefined) ?? "").toLowerCase()];
    if (t === undefined) throw new UsageError(`--type must be f32, f16, q8_0 or q4_0`);
    const { bytes } = await requantize(input, output, t, progressBar(`writing ${output}`));
    process.stderr.write(`wrote ${output}: ${formatBytes(bytes)}\n`);
  },
};
