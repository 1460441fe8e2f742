// neuronpipe pack: the neuron pack (FFN neurons as 4 KiB-aligned bundles in hot-first order, plus the predictor).
import { existsSync, realpathSync } from "node:fs";
import { resolve } from "node:path";
import { tensorTypeName } from "../../gguf/types.js";
import { weightTypeIds } from "../../tools/synth/synth.js";
import { openPack } from "../../sparse/pack/open.js";
import { writePack } from "../../sparse/pack/write.js";
import { formatBytes } from "../../util/bytes.js";
import { checkOverwrite, forceHelp, forceOption, UsageError, type Command } from "../command.js";
import { defaultModelPath } from "../model-flags.js";
import { progressBar } from "../progress.js";

export const pack: Command = {
  summary: "write the neuron pack: FFN neurons as 4 KiB-aligned bundles in hot-first order, plus the predictor",
  usage: "neuronpipe pack [--model PATH] [--profile PATH] [--predictor PATH | --no-predictor] [--down-type same|q8_0|…] [--out PATH]",
  options: {
    model: { type: "string", short: "m" },
    profile: { type: "string" },
    predictor: { type: "string" },
    "no-predictor": { type: "boolean" },
    "down-type": { type: "string" },
    out: { type: "string", short: "o" },
    ...forceOption,
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  },
  help: {
    model: "GGUF model (default: the default model)",
    profile: "activation profile (default: MODEL.profile.gguf, written by `neuronpipe profile`)",
    "down-type": "type of the re-laid down columns: same (default), f32, f16, q8_0, q4_0 (q8_0 for a Q4_0 model: ~12× less re-layout error, same reads at n_embd 4096)",
    predictor: "predictor file (default: MODEL.predictor.gguf if it exists, written by `neuronpipe train-predictor`)",
    "no-predictor": "pack without a predictor",
    out: "output file (default: MODEL without .gguf + .pack.gguf)",
    ...forceHelp,
    json: "print the summary as JSON",
  },
  async run(v) {
    if (v.predictor !== undefined && v["no-predictor"]) throw new UsageError("--predictor and --no-predictor exclude each other");
    const model = (v.model as string | undefined) ?? defaultModelPath();
    if (!existsSync(model)) throw new Error(`${model}: no such model file`);
    const profile = (v.profile as string | undefined) ?? `${model}.profile.gguf`;
    if (!existsSync(profile)) {
      throw new Error(`${profile}: no activation profile; run \`neuronpipe profile --model ${model}\` first${v.profile ? "" : " (or pass --profile PATH)"}`);
    }
    let predictor = v["no-predictor"] ? undefined : (v.predictor as string | undefined);
    let note = v["no-predictor"] ? "without a predictor (--no-predictor)" : "";
    if (!v["no-predictor"] && predictor === undefined) {
      const def = `${model}.predictor.gguf`;
      if (existsSync(def)) predictor = def;
      else note = `without a predictor: ${def} does not exist (train one with \`neuronpipe train-predictor\`)`;
    }
    if (predictor !== undefined && !existsSync(predictor)) throw new Error(`${predictor}: no such predictor file`);
    const out = (v.out as string | undefined) ?? `${model.replace(/\.gguf$/i, "")}.pack.gguf`;
    if (resolve(out) === resolve(model) || (existsSync(out) && realpathSync(out) === realpathSync(model))) {
      throw new UsageError(`--out ${out} is the input model; choose another output path`);
    }
    checkOverwrite(out, v);
    if (note && !v.json) process.stderr.write(`packing ${note}\n`);
    const t0 = performance.now();
    const dt = ((v["down-type"] as string | undefined) ?? "same").toLowerCase();
    if (dt !== "same" && weightTypeIds[dt] === undefined) throw new UsageError(`--down-type must be same, f32, f16, q8_0 or q4_0, got "${dt}"`);
    const r = await writePack(model, out, { profile, predictor, downType: dt === "same" ? undefined : weightTypeIds[dt], onProgress: progressBar(`writing ${out}`) });
    const seconds = (performance.now() - t0) / 1000;
    const pack = openPack(out);
    const rows = pack.layers.map((l, i) => ({ layer: i, hotCount: l.hotCount, downRelayoutError: r.downRelayoutError[i]!, ...(l.coldRequests !== undefined && { coldRequests: l.coldRequests }) }));
    if (v.json) {
      process.stdout.write(
        JSON.stringify({
          out,
          bytes: r.bytes,
          seconds,
          model,
          profile,
          predictor: predictor ?? null,
          gateBlock: pack.gateBlock,
          upDownBlock: pack.upDownBlock,
          bundleBytes: pack.bundleBytes,
          layers: rows,
        }) + "\n",
      );
      return;
    }
    const tn = (t: number) => tensorTypeName(t);
    const o: string[] = [];
    o.push(`wrote ${out}: ${formatBytes(r.bytes)} in ${seconds.toFixed(1)} s (from ${model}, profile ${profile}, ${predictor ? `predictor ${predictor}` : "no predictor"})`);
    o.push(
      `bundle: gate ${tn(pack.gateType)} ${pack.gateBytes} B → ${pack.gateBlock} B block, up ${tn(pack.upType)} ${pack.upBytes} B + down column ${tn(pack.downType)} ${pack.downBytes} B → ${pack.upDownBlock} B block; ${pack.bundleBytes} B per neuron`,
    );
    // the profile's order: read requests per fired cold neuron, adjacent ones sharing one (held out)
    const ordered = rows.every((row) => row.coldRequests !== undefined);
    o.push(`layer  hot neurons (80% of firings)  down re-layout error ‖D'−D‖/‖D‖${ordered ? "  cold reads per fired neuron (co-activation order)" : ""}`);
    for (const row of rows) {
      const err = row.downRelayoutError === 0 ? "0 (exact)" : row.downRelayoutError.toExponential(3);
      o.push(`${String(row.layer).padStart(5)}  ${`${row.hotCount} of ${pack.config.nFF}`.padStart(28)}  ${ordered ? `${err.padEnd(33)}  ${row.coldRequests!.toFixed(2)}` : err}`);
    }
    process.stdout.write(o.join("\n") + "\n");
  },
};
