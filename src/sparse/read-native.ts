// Reading file bytes straight into native memory (through a typed-array view, no JS copy):
// the fixed region and the predictors of a pack, which the memory plan counts once.
import { readSync } from "node:fs";
import { native } from "../native.js";
import { PACK_ALIGNMENT } from "./pack/format.js";

/**
 * The direct-I/O alignment a loader of `path` would have (loaderInfo().align: 512 where the
 * filesystem takes sector-aligned O_DIRECT reads, else 4096); the pack's block alignment (whole
 * blocks read) when the file cannot be opened with O_DIRECT. The planner prices reads with it
 * before any loader is open.
 */
export function directReadAlign(path: string): number {
  const n = native();
  let id: number;
  try {
    id = n.openLoader(path, { backend: "pread", queueDepth: 1, threads: 1, directIO: true });
  } catch {
    return PACK_ALIGNMENT;
  }
  try {
    return n.loaderInfo(id).align;
  } finally {
    n.closeLoader(id);
  }
}

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
