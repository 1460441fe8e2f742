// A pack's predictors, read from the file straight into native memory (no JS copy: the memory
// plan counts these bytes once).
import { closeSync, openSync } from "node:fs";
import { native } from "../../native.js";
import type { Pack } from "../pack/format.js";
import { readIntoNative } from "../read-native.js";
import type { PredictorWeights } from "./layout.js";

export function loadPredictorWeights(pack: Pack): PredictorWeights {
  if (!pack.predictor) {
    throw new Error(
      `${pack.path}: the pack has no predictors (blk.N.fc1.weight / blk.N.fc2.weight); train them with \`neuronpipe train-predictor\` and pack again, or run with the oracle predictor`,
    );
  }
  const n = native();
  const { nEmbd, nFF } = pack.config;
  let bytes = 0;
  for (const l of pack.predictor) bytes += l.hidden * (nEmbd + nFF) * 4;
  const buf = n.alloc(bytes);
  const fc1: number[] = [];
  const fc2: number[] = [];
  const fd = openSync(pack.path, "r");
  try {
    let o = 0;
    for (const [i, l] of pack.predictor.entries()) {
      fc1.push(o);
      readIntoNative(fd, pack.path, `tensor blk.${i}.fc1.weight`, l.fc1Offset, l.hidden * nEmbd * 4, buf, o);
      o += l.hidden * nEmbd * 4;
      fc2.push(o);
      readIntoNative(fd, pack.path, `tensor blk.${i}.fc2.weight`, l.fc2Offset, nFF * l.hidden * 4, buf, o);
      o += nFF * l.hidden * 4;
    }
  } catch (e) {
    n.free(buf);
    throw e;
  } finally {
    closeSync(fd);
  }
  return { buf, fc1, fc2, hidden: pack.predictor.map((l) => l.hidden), threshold: pack.predictor.map((l) => l.threshold) };
}
