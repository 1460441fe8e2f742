// `len` bytes of a file at `off`, read with node:fs: the independent reference for what the
// native loader put in memory.
import { closeSync, openSync, readSync } from "node:fs";

export function fileBytes(path: string, off: number, len: number): Uint8Array {
  const fd = openSync(path, "r");
  try {
    const b = new Uint8Array(len);
    readSync(fd, b, 0, len, off);
    return b;
  } finally {
    closeSync(fd);
  }
}
