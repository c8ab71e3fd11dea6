#!/usr/bin/env bash
# Main job: install, build, create the default model, decode a few tokens on it.
# On a GPU: the fused backend (checked against the reference on the way). Without one: the CPU
# reference on the tiny config, saying so. SWAPFFN_CUDA=OFF: built without CUDA (build/cpu).
set -euo pipefail
cd "$(dirname "$0")"
bin=$(bash scripts/deps.sh)/apps/swapffn
"$bin" info
mkdir -p build/models
if "$bin" info --has-gpu >/dev/null 2>&1; then
  [ -f build/models/default.safetensors ] || "$bin" init --config default --seed 1 --out build/models/default.safetensors
  backend=${SWAPFFN_BACKEND:-fused}
  echo "== GPU found: decoding 32 tokens with backend '$backend' on the default model (B=1)"
  "$bin" run --model build/models/default.safetensors --backend "$backend" --batch 1 --tokens 32
  "$bin" check --model build/models/default.safetensors --backend "$backend" --batch 1 --tokens 2
else
  [ -f build/models/tiny.safetensors ] || "$bin" init --config tiny --seed 1 --out build/models/tiny.safetensors
  echo "== No usable GPU: decoding 8 tokens with the CPU reference on the TINY config (not the default model)"
  "$bin" run --model build/models/tiny.safetensors --backend reference --batch 2 --tokens 8
fi
