#!/usr/bin/env bash
# Checks the CPU reference against the independent NumPy implementation of SPEC.md
# (scripts/spec_oracle.py): the oracle's self-test, then two `swapffn run --dump` legs on the tiny
# model (from the zero state, then from the state the first leg saved), then a negative control
# (a dump with one corrupted delta value must be rejected, so this check can fail), then the fp8
# recipe simulation built on the oracle (scripts/fp8_recipe_sim.py): its self-test and a tiny run.
# Usage: bash scripts/spec-oracle-check.sh path/to/swapffn
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 path/to/swapffn" >&2
  exit 2
fi
swapffn="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
[ -x "$swapffn" ] || { echo "spec-oracle-check: $1 is not an executable" >&2; exit 2; }
oracle="$(cd "$(dirname "$0")" && pwd)/spec_oracle.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

echo "== spec oracle self-test"
python3 "$oracle" --selftest

echo "== swapffn reference on the tiny model"
"$swapffn" init --config tiny --seed 7 --out m.safetensors
"$swapffn" run --model m.safetensors --backend reference --batch 2 --tokens 4 --seed 3 \
  --dump d.safetensors --state-out s.safetensors
python3 "$oracle" --model m.safetensors --dump d.safetensors --require-swaps

echo "== second leg, from the saved state"
"$swapffn" run --model m.safetensors --backend reference --batch 2 --tokens 4 --seed 4 \
  --state-in s.safetensors --dump d2.safetensors
# The second leg must start from exactly the state the first leg ended in.
python3 - "$oracle" <<'EOF'
import sys, numpy as np
sys.path.insert(0, __import__("os").path.dirname(sys.argv[1]))
from spec_oracle import read_safetensors
d1, _ = read_safetensors("d.safetensors")
d2, _ = read_safetensors("d2.safetensors")
for a, b in (("ram", "ram0"), ("stream_map", "stream_map0")):
    if b not in d2:
        sys.exit(f"second leg's dump has no '{b}' although --state-in was given")
    if d1[a][0] != d2[b][0] or not np.array_equal(d1[a][1], d2[b][1]):
        sys.exit(f"second leg's '{b}' is not the first leg's final '{a}'")
print("second leg starts from the first leg's final state")
EOF
python3 "$oracle" --model m.safetensors --dump d2.safetensors --require-swaps

echo "== negative control: one delta value corrupted"
python3 - <<'EOF'
# Rewrites one F32 value of `delta` in place in a copy of the dump: +1% of delta's L2 norm.
import json, shutil, struct
import numpy as np
shutil.copy("d.safetensors", "bad.safetensors")
with open("bad.safetensors", "r+b") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    info = json.loads(f.read(n))["delta"]
    begin, end = info["data_offsets"]
    f.seek(8 + n + begin)
    delta = np.frombuffer(f.read(end - begin), dtype="<f4").copy()
    i = delta.size // 3
    delta[i] += 0.01 * np.linalg.norm(delta.astype(np.float64))
    f.seek(8 + n + begin + 4 * i)
    f.write(delta[i:i + 1].tobytes())
EOF
# It must be rejected for its delta (not for a crash or an unreadable file).
if python3 "$oracle" --model m.safetensors --dump bad.safetensors >bad.log 2>&1 \
   || ! grep -q "^REJECT: delta rel L2" bad.log; then
  cat bad.log
  echo "spec-oracle-check: FAIL: the oracle did not reject the corrupted delta" >&2
  exit 1
fi
grep "^REJECT" bad.log

echo "== fp8 recipe simulation on the oracle: self-test, then the tiny model"
sim="$(dirname "$oracle")/fp8_recipe_sim.py"
python3 "$sim" --selftest
python3 "$sim" --model m.safetensors --tokens 2
echo "spec-oracle-check: PASS (the corrupted dump was rejected, the reference's dumps accepted)"
