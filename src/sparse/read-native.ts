// Reading file bytes straight into native memory (through a typed-array view, no JS copy):
// the fixed region and the predictors of a pack, which the memory plan counts once.
import { readSync } from "node:fs";
import { native } from "../native.js";

/** Read `len` bytes at `fileOff` of the open file `fd` into native buffer `buf` at `dstOff`; `what` names the data in errors. */
export function readIntoNative(fd: number, path: string, what: string, fileOff: number, len: number, buf: number, dstOff: number): void {
  const n = native();
  for (let done = 0; done < len; ) {
    const chunk = Math.min(64 * 2 ** 20, len - done); // views of at most 64 MiB
    const got = readSync(fd, n.viewU8(buf, dstOff + done, chunk), 0, chunk, fileOff + done);
    if (got <= 0) throw new Error(`${path}: ${what}: the file ends at byte ${fileOff + done}, ${len - done} bytes short (truncated?)`);
    done += got;
  }
}
