#!/usr/bin/env bash
# `pip install .` as a new user runs it: a fresh virtual environment, pip's build isolation (the
# build requirements from PyPI), then `import swapffn` (and its NVFP4 module) and the `swapffn` and
# `swapffn-nvfp4` commands from that environment. With nvcc: once with the CUDA backends and once as a machine without nvcc builds
# (SWAPFFN_CUDA=OFF); without nvcc, the second only. CI (.ci/run) runs it after the tests.
# Usage: scripts/install-test.sh [cuda|cpu]...   (default: both where nvcc is present, else cpu)
set -euo pipefail
cd "$(dirname "$0")/.."

have_nvcc() { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }
variants=("$@")
if [ ${#variants[@]} -eq 0 ]; then
  if have_nvcc; then variants=(cuda cpu); else variants=(cpu); fi
fi

for v in "${variants[@]}"; do
  venv=$PWD/build/venv-$v work=$PWD/build/pip-$v
  args=""
  [ "$v" = cpu ] && args="-DSWAPFFN_CUDA=OFF"
  rm -rf "$venv" && mkdir -p "$work"
  python3 -m venv "$venv"
  echo "== install-test $v: pip install . in a fresh venv with build isolation${args:+ ($args)}; takes minutes" >&2
  t0=$SECONDS
  CMAKE_ARGS="$args" "$venv/bin/python" -m pip install -q --disable-pip-version-check -C build-dir="$work/build" . >&2
  echo "== install-test $v: installed in $((SECONDS - t0)) s" >&2
  # From another directory, so that only the installed package can be imported.
  (cd "$work" && "$venv/bin/python" - "$v" <<'PY'
import sys
import swapffn
from swapffn import _nvfp4
built = swapffn.backends(runnable=False)
want_cuda = sys.argv[1] == "cuda"
assert ("fused" in built) == want_cuda, f"backends built: {built}"
assert _nvfp4.with_cuda == want_cuda, f"swapffn._nvfp4.with_cuda: {_nvfp4.with_cuda}"
print(f"import swapffn {swapffn.__version__}: backends built {built}, run here {swapffn.backends()}")
PY
  )
  "$venv/bin/swapffn" --version
  "$venv/bin/swapffn-nvfp4" --version
  "$venv/bin/swapffn" init --config tiny --seed 1 --out "$work/m.safetensors" >/dev/null
  "$venv/bin/swapffn" run --model "$work/m.safetensors" --backend reference --batch 1 --tokens 2 | grep '^checksum'
done
