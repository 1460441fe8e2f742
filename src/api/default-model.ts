// The model shipped in the package (models/neuronpipe-default.gguf, trained by tools/train): what
// the CLI runs when no --model is given, and what a library user can load to try things.
import { shippedFile } from "../util/package-files.js";

/** The path of the shipped default model. */
export function defaultModelPath(): string {
  return shippedFile("neuronpipe-default.gguf");
}
