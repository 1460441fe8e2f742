#!/usr/bin/env bash
# Install the llama.cpp peer (node-llama-cpp 3.22.1) into bench/node_modules, separately from
# the main dependency tree, in two builds of the same llama.cpp release (bench/peer/llama-peer.mjs):
#   prebuilt  node-llama-cpp's CPU binary (@node-llama-cpp/linux-x64; repacks Q4_0 at load):
#             parity tests and in-memory speed
#   norepack  built here from the llama.cpp source node-llama-cpp ships (a git bundle, offline)
#             with GGML_CPU_REPACK=OFF GGML_NATIVE=ON: weights stay in the page cache, so it runs
#             under a memory cgroup (bench/sparse.js). ~3 min on 2 cores, ~260 MB.
# Idempotent: each part is skipped when it is already there and loads (checked by loading it).
# Works offline after the first install and needs only the npm registry for it.
#
#   bash bench/install.sh                  # install / build if needed, then verify both load
#   bash bench/install.sh --prebuilt-only  # only the prebuilt binary (what the tests need)
#   bash bench/install.sh --force          # reinstall from the lockfile and rebuild
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
BENCH="$PWD"
VERSION=3.22.1

force=0
prebuilt_only=0
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    --prebuilt-only) prebuilt_only=1 ;;
    -h|--help) sed -n '2,15p' "$BENCH/install.sh" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/install.sh: unknown option $a (use --prebuilt-only, --force)" >&2; exit 2 ;;
  esac
done

installed_version() {
  local f="$BENCH/node_modules/$1/package.json"
  [[ -f "$f" ]] && node -p "require('$f').version" 2>/dev/null || true
}

need=1
if [[ $force == 0 ]] &&
   [[ "$(installed_version node-llama-cpp)" == "$VERSION" ]] &&
   [[ "$(installed_version @node-llama-cpp/linux-x64)" == "$VERSION" ]] &&
   node "$BENCH/peer/check.mjs" prebuilt >/dev/null 2>&1; then
  need=0
fi

if [[ $need == 1 ]]; then
  echo "bench/install.sh: installing node-llama-cpp $VERSION (CPU binary only) into bench/node_modules" >&2
  # --omit=optional drops the CUDA / Vulkan / other-platform binaries (~640 MB) that
  # node-llama-cpp lists as optional; the linux-x64 CPU binary is a direct dependency in
  # bench/package.json so it stays. node-llama-cpp's postinstall (which could try to download or
  # build llama.cpp) is denied in package.json ("allowScripts", npm 11) and told to skip
  # downloads in any case (older npm runs it).
  export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
  npm_args=(--prefix "$BENCH" --omit=optional --no-audit --no-fund --loglevel=error)
  # `npm install`, not `npm ci`: npm 11 writes lockfiles without entries for the optional
  # packages of other platforms and then `npm ci` rejects them as out of sync. The lockfile
  # still pins every version that is installed.
  npm install "${npm_args[@]}"
fi

node "$BENCH/peer/check.mjs" prebuilt

if [[ $prebuilt_only == 1 ]]; then
  exit 0
fi

# The source-built peer without Q4_0 repacking. A build made on another CPU (GGML_NATIVE) or for
# another node-llama-cpp fails to load, and is rebuilt.
if [[ $force == 1 ]] || ! node "$BENCH/peer/check.mjs" norepack >/dev/null 2>&1; then
  node "$BENCH/peer/build.mjs" norepack
fi
node "$BENCH/peer/check.mjs" norepack
