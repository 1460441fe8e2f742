// `node bench/peer/check.mjs [prebuilt|norepack]`: load one build of the llama.cpp peer offline
// and print what it is. Exits non-zero (with the install hint) when it is missing, does not load,
// or is not what it should be: the "norepack" build must not repack Q4_0 (no REPACK in llama.cpp's
// system info), since that is what keeps its weights in the page cache under a memory limit.
import { peerInfo, peerKind, PEERS, PeerNotInstalledError } from "./llama-peer.mjs";

let kind;
try {
  kind = peerKind(process.argv[2]);
  const info = await peerInfo(kind);
  console.log(`llama.cpp peer "${kind}": node-llama-cpp ${info.nodeLlamaCpp} (llama.cpp ${info.llamaCppRelease}, ${info.buildType}, gpu: ${info.gpu}${Object.keys(info.cmakeOptions).length ? `, ${Object.entries(info.cmakeOptions).map(([k, v]) => `${k}=${v}`).join(" ")}` : ""})`);
  console.log(info.systemInfo);
  if (info.repack !== PEERS[kind].repack) {
    console.error(`llama.cpp peer "${kind}": REPACK is ${info.repack ? "on" : "off"} in its system info, expected ${PEERS[kind].repack ? "on" : "off"}`);
    process.exit(1);
  }
  process.exit(0);
} catch (e) {
  const hint = kind === "norepack" ? " (build it with `bash bench/install.sh`)" : "";
  console.error(e instanceof PeerNotInstalledError ? e.message : `llama.cpp peer "${kind ?? process.argv[2]}" does not load${hint}: ${e?.stack ?? e}`);
  process.exit(1);
}
