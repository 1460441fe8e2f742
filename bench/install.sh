#!/usr/bin/env bash
# Install the llama.cpp peer (node-llama-cpp 3.22.1, CPU prebuilt binary only) into
# bench/node_modules, separately from the main dependency tree. Idempotent: does nothing when
# the pinned versions are already installed and load. Works offline after the first install
# and needs only the npm registry for it (no downloads by node-llama-cpp itself).
#
#   bash bench/install.sh           # install if needed, then verify the binary loads
#   bash bench/install.sh --force   # reinstall from the lockfile
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
BENCH="$PWD"
VERSION=3.22.1

installed_version() {
  local f="$BENCH/node_modules/$1/package.json"
  [[ -f "$f" ]] && node -p "require('$f').version" 2>/dev/null || true
}

need=1
if [[ "${1:-}" != "--force" ]] &&
   [[ "$(installed_version node-llama-cpp)" == "$VERSION" ]] &&
   [[ "$(installed_version @node-llama-cpp/linux-x64)" == "$VERSION" ]] &&
   node "$BENCH/peer/check.mjs" >/dev/null 2>&1; then
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

node "$BENCH/peer/check.mjs"
