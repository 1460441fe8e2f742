// Micro-benchmark (not a test): what random direct-I/O reads of a file cost, by request size
// and queue depth, through the loader (native/src/io/loader.cc): reads/s, MB/s, the process's
// CPU time per request (user + system: the submissions, the waits for completions, and what the
// kernel charges this process of them) and the hypervisor's steal per request (on a VM whose
// host emulates the disk on the same cores, CPU the reads take that no process is charged
// for). The device's limit is IOPS below some size and bandwidth above it; the CPU per request
// is what reads take from compute on a machine with few cores. --addon runs another build's
// loader (an A/B of two builds, in alternation, each going first every other round).
// Usage: node native/bench/read-cost.mjs --file BIG_FILE [--sizes 4096,8192,16384]
//          [--depths 32,128] [--seconds 1.5] [--rounds 3] [--addon OTHER.node] [--fixed] [--json]
// --fixed registers each destination buffer with the ring (loaderFixBuffer) in the builds that
// have it.
import { statSync } from "node:fs";
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import { cpuTimes, stealCores } from "../../bench/lib/measure.mjs";
const require = createRequire(import.meta.url);

const { values: v } = parseArgs({
  options: {
    file: { type: "string" },
    sizes: { type: "string", default: "4096,8192,12288,16384,24576,49152" },
    depths: { type: "string", default: "32,128" },
    seconds: { type: "string", default: "1.5" },
    rounds: { type: "string", default: "3" },
    addon: { type: "string" },
    fixed: { type: "boolean", default: false },
    json: { type: "boolean", default: false },
  },
});
if (!v.file) {
  process.stderr.write("usage: node native/bench/read-cost.mjs --file BIG_FILE [--sizes …] [--depths …] [--addon OTHER.node]\n");
  process.exit(2);
}
const builds = [["this build", require("../build/Release/neuronpipe.node")]];
if (v.addon) builds.push([v.addon, require(v.addon)]);
const sizes = v.sizes.split(",").map(Number);
const depths = v.depths.split(",").map(Number);
const seconds = Number(v.seconds);
const rounds = Number(v.rounds);
const fileSize = statSync(v.file).size;
const median = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];

/** Random reads of `size` bytes at `size`-aligned offsets, `depth` in flight, batches of 8·depth, for `seconds`. */
function measure(N, size, depth, seed) {
  const id = N.openLoader(v.file, { backend: "auto", queueDepth: depth, directIO: true });
  const perBatch = 8 * depth;
  const buf = N.alloc(perBatch * size);
  try {
    // --fixed: the destination registered with the ring (READ_FIXED), where the build can
    if (v.fixed && N.loaderFixBuffer) {
      const why = N.loaderFixBuffer(id, buf);
      if (why) throw new Error(`--fixed: ${why}`);
    }
    const slotsInFile = Math.floor(fileSize / size) - 1;
    const reqs = new Float64Array(4 * perBatch);
    let x = seed >>> 0;
    let reads = 0;
    const cpu0 = process.cpuUsage();
    const stat0 = cpuTimes();
    const t0 = performance.now();
    let t = 0;
    while (t < seconds * 1000) {
      for (let i = 0; i < perBatch; i++) {
        x = (Math.imul(x, 1664525) + 1013904223) >>> 0; // a fixed LCG: every build reads the same offsets
        reqs.set([(x % slotsInFile) * size, size, buf, i * size], 4 * i);
      }
      N.readBatch(id, reqs);
      reads += perBatch;
      t = performance.now() - t0;
    }
    const cpu = process.cpuUsage(cpu0);
    const steal = stealCores(stat0, cpuTimes(), t / 1000);
    return { readsPerSecond: reads / (t / 1000), mbPerSecond: (reads * size) / (t / 1000) / 1e6, cpuUsPerRead: (cpu.user + cpu.system) / reads, stealUsPerRead: steal === undefined ? NaN : (steal * t * 1000) / reads, backend: N.loaderInfo(id).backend };
  } finally {
    N.free(buf);
    N.closeLoader(id);
  }
}

const rows = [];
for (const size of sizes) {
  for (const depth of depths) {
    const got = builds.map(() => []);
    // the builds take turns going first, round by round (the device's speed drifts within seconds)
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? builds.map((_, b) => b) : builds.map((_, b) => builds.length - 1 - b);
      for (const b of order) got[b].push(measure(builds[b][1], size, depth, 12345 + r));
    }
    builds.forEach(([name], b) => {
      const m = (k) => median(got[b].map((g) => g[k]));
      rows.push({ build: name, backend: got[b][0].backend, size, depth, readsPerSecond: m("readsPerSecond"), mbPerSecond: m("mbPerSecond"), cpuUsPerRead: m("cpuUsPerRead"), stealUsPerRead: m("stealUsPerRead") });
    });
  }
}
if (v.json) console.log(JSON.stringify({ file: v.file, seconds, rounds, rows }, null, 2));
else {
  console.log(`random O_DIRECT reads of ${v.file} (${(fileSize / 2 ** 30).toFixed(2)} GiB), median of ${rounds} rounds of ${seconds} s${v.fixed ? "; destinations registered (READ_FIXED) where the build can" : ""}`);
  console.log("| build | size | depth | reads/s | MB/s | CPU µs / read | steal µs / read |\n|---|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) console.log(`| ${r.build} (${r.backend}) | ${r.size} | ${r.depth} | ${(r.readsPerSecond / 1000).toFixed(1)}K | ${r.mbPerSecond.toFixed(0)} | ${r.cpuUsPerRead.toFixed(2)} | ${r.stealUsPerRead.toFixed(2)} |`);
}
