// `node bench/peer/build.mjs [norepack]`: build a source peer of llama.cpp (see PEERS in
// llama-peer.mjs) offline, from the llama.cpp source that node-llama-cpp ships as a git bundle
// (`node-llama-cpp source download --gpu false`, CPU only), with that peer's CMake options.
// ~3 minutes on 2 cores; the log goes to bench/node_modules/.neuronpipe-<peer>-build.log.
// Called by bench/install.sh, which first checks whether the build already exists and loads.
import { spawnSync } from "node:child_process";
import { openSync, closeSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { benchDir, peerBuildEnv, peerKind, PEERS } from "./llama-peer.mjs";

const kind = peerKind(process.argv[2] ?? "norepack");
if (PEERS[kind].usePrebuiltBinaries) {
  console.error(`llama.cpp peer "${kind}" is a prebuilt binary: nothing to build`);
  process.exit(1);
}
const logFile = join(benchDir, "node_modules", `.neuronpipe-${kind}-build.log`);
const opts = Object.entries(PEERS[kind].cmakeOptions).map(([k, v]) => `${k}=${v}`).join(" ");
console.error(`bench/peer/build.mjs: building llama.cpp peer "${kind}" (${opts}) from node-llama-cpp's bundled source, offline; log: ${logFile}`);
const t0 = performance.now();
const fd = openSync(logFile, "w");
const r = spawnSync("npx", ["--no-install", "node-llama-cpp", "source", "download", "--gpu", "false", "--noUsageExample"], {
  cwd: benchDir,
  env: peerBuildEnv(kind),
  stdio: ["ignore", fd, fd],
});
closeSync(fd);
if (r.status !== 0) {
  const tail = readFileSync(logFile, "utf8").split("\n").slice(-40).join("\n");
  console.error(`${tail}\nbench/peer/build.mjs: the build of "${kind}" failed (${r.error ?? `exit ${r.status ?? r.signal}`}); full log: ${logFile}`);
  process.exit(1);
}
console.error(`bench/peer/build.mjs: built "${kind}" in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
