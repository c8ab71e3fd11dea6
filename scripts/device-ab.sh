#!/usr/bin/env bash
# An A/B of one source file's variants in one device call, for the experiment log: the tree is built
# (scripts/device-build.sh), then for each variant (the tree's own file first, as "tree", then each
# file named) the file is put in place, the CLI rebuilt, the step's kernels timed one by one under
# ncu (the mean per kernel name at each batch size) and `swapffn bench` run. The tree's file is put
# back at the end. Same machine, same call: compare the variants' numbers with each other.
# Usage: scripts/device-ab.sh SOURCE [VARIANT_FILE ...] (SOURCE: the tree's path of the file)
# Env: BACKEND (fused-fp8), NCU_BATCHES ("1 16"), BENCH_BATCHES (1,16,64), TOKENS (8), REPEATS (3),
#      TESTS (a gtest filter run on the tree's variant first; empty: none), OUT (build/device-out).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: scripts/device-ab.sh SOURCE [VARIANT_FILE ...]" >&2; exit 2; }
src=$1
shift
for v in "$@"; do [ -f "$v" ] || { echo "device-ab: no variant file $v" >&2; exit 2; }; done
build=build/device
out=${OUT:-build/device-out}
mkdir -p "$out"
backend=${BACKEND:-fused-fp8}
backends=fused
[ "$backend" = fused ] || backends="fused,$backend"
saved=$(mktemp)
cp "$src" "$saved"
trap 'cp "$saved" "$src"; rm -f "$saved"' EXIT

bash scripts/device-build.sh "$build" > "$out/build.log" 2>&1 || { echo "device-ab: build failed ($out/build.log)"; exit 1; }
bin=$build/apps/swapffn
model=$(mktemp --suffix=.safetensors)
"$bin" init --out "$model" --config default > /dev/null
if [ -n "${TESTS:-}" ]; then
  "$build/tests/swapffn_gpu_tests" "--gtest_filter=$TESTS" --gtest_brief=1 > "$out/tests.log" 2>&1
  echo "tests ($TESTS): rc=$?"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$out/tests.log" | head -10
fi

# ncu's CSV: the mean gpu__time_duration of each kernel name (thousands separators, ns or us).
kernel_means() {
  python3 - "$1" <<'EOF'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows:
    sys.exit(0)
head = rows[0]
name, unit, value = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
sums = collections.defaultdict(lambda: [0, 0.0])
for r in rows[1:]:
    if r[unit] in us:
        s = sums[r[name][:60]]
        s[0] += 1
        s[1] += float(r[value].replace(",", "")) * us[r[unit]]
for k, (n, t) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
    print(f"  {n:4d} x {t / n:9.2f} us  {k}")
EOF
}

variant=tree
for file in "" "$@"; do
  if [ -n "$file" ]; then
    variant=$(basename "$file")
    cp "$file" "$src"
    cmake --build "$build" --target swapffn_cli > "$out/build-$variant.log" 2>&1 ||
      { echo "== $variant: build failed ($out/build-$variant.log)"; continue; }
  fi
  for b in ${NCU_BATCHES:-1 16}; do
    csv="$out/ncu-$variant-b$b.csv"
    /usr/local/cuda/bin/ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
      "$bin" run --model "$model" --backend "$backend" --batch "$b" --tokens 1 --no-graph > "$csv" 2> /dev/null
    echo "== $variant, B = $b, ncu (one token, kernels serialised; construction's probes included)"
    kernel_means "$csv" | head -8
  done
  "$bin" bench --config default --batches "${BENCH_BATCHES:-1,16,64}" --backends "$backends" \
    --tokens "${TOKENS:-8}" --warmup 2 --repeats "${REPEATS:-3}" --cooldown 1 > "$out/bench-$variant.log" 2>&1
  echo "== $variant, bench (rc $?)"
  grep -E "^(fused|cublas-fp8)|fp8 over|flip rate" "$out/bench-$variant.log" | head -12
done
rm -f "$model"
