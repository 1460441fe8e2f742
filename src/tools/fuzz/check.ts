// One mutant run as a user would: load it (a pack under a memory budget), generate two tokens,
// and judge what happened. A clear refusal is fine; so is a model that loads and generates finite
// logits. A defect is: an error message over 500 characters or with control characters, an
// internal error that names no input (a TypeError from inside the code, say), logits that are not
// finite without an error, or (seen by the runner, run.ts) a crash or a hang.
import { loadModel } from "../../api/model.js";
import { CONTROL_CHARACTERS } from "../../util/message.js";

export type Outcome =
  | { result: "ok" }
  | { result: "refused"; message: string }
  | { result: "defect"; defect: "long-message" | "control-characters" | "internal-error" | "non-finite-logits" | "crash" | "hang"; message: string };

/** Messages of JavaScript's own errors: a bug surfacing, not a refusal of the input. */
const INTERNAL = /Cannot read propert|is not a function|is not iterable|undefined is not|Cannot convert|Maximum call stack|Invalid array length|Invalid typed array length|out of memory|Array buffer allocation failed|offset is out of bounds|RangeError: Offset|The value of "offset"|ERR_OUT_OF_RANGE|ERR_BUFFER_OUT_OF_BOUNDS/;

export function judgeError(e: unknown): Outcome {
  const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  if (message.length > 500) return { result: "defect", defect: "long-message", message: message.slice(0, 300) };
  if (CONTROL_CHARACTERS.test(message)) return { result: "defect", defect: "control-characters", message: JSON.stringify(message.slice(0, 300)) };
  if (!(e instanceof Error) || INTERNAL.test(message) || e.name === "TypeError") return { result: "defect", defect: "internal-error", message: `${message}\n${e instanceof Error ? (e.stack ?? "").split("\n").slice(1, 4).join("\n") : ""}` };
  return { result: "refused", message };
}

export interface CheckOptions {
  /** A neuron pack: load it under this budget (bytes or "26MiB"). */
  memory?: string | number;
}

export async function checkMutant(path: string, o: CheckOptions = {}): Promise<Outcome> {
  let model;
  try {
    model = await loadModel(path, { contextSize: 32, ...(o.memory !== undefined && { memory: o.memory }) });
  } catch (e) {
    return judgeError(e);
  }
  try {
    const s = model.createSession({ contextSize: 32 });
    // generation must refuse logits that are not finite; check it did, on the prompt's logits
    for await (const _ of s.generate("The whale", { maxTokens: 2, temperature: 0 })) {
      // pieces ignored: any text is fine
    }
    s.reset();
    const logits = s.evaluate(model.tokenizer.encode("The whale"));
    if (logits.some((x) => !Number.isFinite(x))) return { result: "defect", defect: "non-finite-logits", message: "generation ran on logits that are not finite" };
    s.dispose();
    return { result: "ok" };
  } catch (e) {
    return judgeError(e);
  } finally {
    await model.close();
  }
}
