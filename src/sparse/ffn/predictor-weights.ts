// A pack's predictors, read from the file straight into native memory (no JS copy: the memory
// plan counts these bytes once).
import { closeSync, openSync } from "node:fs";
import { native } from "../../native.js";
import type { Pack } from "../pack/format.js";
import { predictorBytes } from "../memory-plan.js";
import { readIntoNative } from "../read-native.js";
import type { PredictorWeights } from "./layout.js";

export function loadPredictorWeights(pack: Pack): PredictorWeights {
  if (!pack.predictor) {
    throw new Error(
      `${pack.path}: the pack has no predictors (blk.N.fc1.weight / blk.N.fc2.weight); train them with \`neuronpipe train-predictor\` and pack again, or run with the oracle predictor`,
    );
  }
  const n = native();
  const { nFF } = pack.config;
  const form = pack.predictor[0]!.form;
  for (const l of pack.predictor) if (l.form === "linear" && l.hidden > nFF) throw new Error(`${pack.path}: predictor rank ${l.hidden} exceeds n_ff ${nFF}`);
  const buf = n.alloc(predictorBytes(pack)); // what the memory plan counted: the tensors back to back
  const fc1: number[] = [];
  const fc2: number[] = [];
  const thresholds: number[] = [];
  const fd = openSync(pack.path, "r");
  try {
    let o = 0;
    for (const [i, l] of pack.predictor.entries()) {
      fc1.push(o);
      readIntoNative(fd, pack.path, `tensor blk.${i}.fc1.weight`, l.fc1Offset, l.fc1Bytes, buf, o);
      o += l.fc1Bytes;
      fc2.push(o);
      readIntoNative(fd, pack.path, `tensor blk.${i}.fc2.weight`, l.fc2Offset, l.fc2Bytes, buf, o);
      o += l.fc2Bytes;
      if (l.thresholdsOffset >= 0) {
        thresholds.push(o);
        readIntoNative(fd, pack.path, `tensor blk.${i}.fc2.threshold`, l.thresholdsOffset, nFF * 4, buf, o);
        o += nFF * 4;
      }
    }
  } catch (e) {
    n.free(buf);
    throw e;
  } finally {
    closeSync(fd);
  }
  return { buf, form, type: pack.predictor[0]!.type, fc1, fc2, hidden: pack.predictor.map((l) => l.hidden), threshold: pack.predictor.map((l) => l.threshold), thresholds };
}
