// `node bench/peer/check.mjs`: load node-llama-cpp's CPU binary offline and print what it is.
// Exits non-zero (with the install hint) when the peer is missing or does not load.
import { peerInfo, PeerNotInstalledError } from "./llama-peer.mjs";

try {
  const info = await peerInfo();
  console.log(`node-llama-cpp ${info.nodeLlamaCpp} (llama.cpp ${info.llamaCppRelease}, ${info.buildType}, gpu: ${info.gpu})`);
  console.log(info.systemInfo);
  process.exit(0);
} catch (e) {
  console.error(e instanceof PeerNotInstalledError ? e.message : `node-llama-cpp does not load: ${e?.stack ?? e}`);
  process.exit(1);
}
