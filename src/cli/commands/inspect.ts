// neuronpipe inspect: a GGUF file's metadata, configuration and tensors.
import { readGGUF } from "../../gguf/reader.js";
import { tensorTypeName, valueTypeName } from "../../gguf/types.js";
import { readConfig } from "../../model/config.js";
import { formatBytes } from "../../util/bytes.js";
import { UsageError, type Command } from "../command.js";

export const inspect: Command = {
  summary: "summarise a GGUF file's metadata and tensors",
  usage: "neuronpipe inspect PATH [--json] [--tensors]",
  options: { json: { type: "boolean" }, tensors: { type: "boolean" }, help: { type: "boolean", short: "h" } },
  help: { json: "print JSON", tensors: "list every tensor (default: first 20 and a summary)" },
  async run(v, pos) {
    const path = pos[0];
    if (!path) throw new UsageError("inspect needs a file path");
    const f = readGGUF(path);
    const meta: Record<string, unknown> = {};
    for (const [k, m] of f.metadata) {
      const val = m.value;
      meta[k] =
        typeof val === "object" && val !== null && "length" in val
          ? `[${valueTypeName[m.elemType ?? 0]} × ${(val as ArrayLike<unknown>).length}]`
          : typeof val === "bigint"
            ? val.toString()
            : val;
    }
    const byType = new Map<string, { n: number; bytes: number }>();
    for (const t of f.tensors) {
      const e = byType.get(tensorTypeName(t.type)) ?? { n: 0, bytes: 0 };
      e.n++;
      e.bytes += t.nbytes;
      byType.set(tensorTypeName(t.type), e);
    }
    let config: unknown;
    try {
      config = readConfig(f);
    } catch (e) {
      config = `not runnable: ${(e as Error).message}`;
    }
    if (v.json) {
      process.stdout.write(
        JSON.stringify({
          path,
          magic: f.magic,
          version: f.version,
          alignment: f.alignment,
          fileSize: f.fileSize,
          metadata: meta,
          config,
          tensors: f.tensors.map((t) => ({ name: t.name, type: tensorTypeName(t.type), ne: t.ne, offset: t.offset, bytes: t.nbytes })),
        }) + "\n",
      );
      return;
    }
    const out: string[] = [];
    out.push(`${path}: ${f.magic} v${f.version}, ${formatBytes(f.fileSize)}, ${f.metadata.size} keys, ${f.tensors.length} tensors, alignment ${f.alignment}`);
    out.push("metadata:");
    for (const [k, val] of Object.entries(meta)) out.push(`  ${k} = ${typeof val === "string" ? val : JSON.stringify(val)}`);
    out.push(`model: ${typeof config === "string" ? config : JSON.stringify(config)}`);
    out.push("tensor types:");
    for (const [t, e] of byType) out.push(`  ${t}: ${e.n} tensors, ${formatBytes(e.bytes)}`);
    const shown = v.tensors ? f.tensors : f.tensors.slice(0, 20);
    out.push("tensors:");
    for (const t of shown) out.push(`  ${t.name}  ${tensorTypeName(t.type)}  [${t.ne.join(", ")}]  ${formatBytes(t.nbytes)} @ ${t.offset}`);
    if (shown.length < f.tensors.length) out.push(`  … ${f.tensors.length - shown.length} more (--tensors lists all)`);
    process.stdout.write(out.join("\n") + "\n");
  },
};
