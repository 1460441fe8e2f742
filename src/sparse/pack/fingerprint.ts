// A cheap identity of a model file, stored in the files derived from it (profile, predictor,
// pack) so that a derived file is never combined with the wrong model. sha256 (hex) over:
// the file size as u64 little-endian, the GGUF header bytes [0, data start), and the first
// min(4096, nbytes) bytes of every tensor's data in directory order. Reads a few hundred KiB
// even for a 7B model.
import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";
import type { GGUFFile } from "../../gguf/reader.js";

const SAMPLE = 4096;

export function modelFingerprint(path: string, f: GGUFFile): string {
  const h = createHash("sha256");
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(f.fileSize));
  h.update(size);
  const fd = openSync(path, "r");
  try {
    const read = (pos: number, len: number) => {
      const b = Buffer.alloc(len);
      let got = 0;
      while (got < len) {
        const r = readSync(fd, b, got, len - got, pos + got);
        if (r === 0) throw new Error(`${path}: file ended at ${pos + got} while fingerprinting (expected ${pos + len} bytes)`);
        got += r;
      }
      return b;
    };
    h.update(read(0, f.dataOffset));
    for (const t of f.tensors) h.update(read(t.offset, Math.min(SAMPLE, t.nbytes)));
  } finally {
    closeSync(fd);
  }
  return h.digest("hex");
}
