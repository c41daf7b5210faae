#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds the library + Python module, then runs the phases asked
# for (default: demo tests bench). Artefacts (logs, result tables) go to $OUT (default ./gpu-out).
#   scripts/device/gpu_suite.sh [demo] [tests] [sanitizer] [bench] [quickbench]
# Env: ARCHS (default 90a), PYTEST_ARGS (extra pytest args, shell-quoted: PYTEST_ARGS="-k 'gelu and bf16'"),
# BENCH_ARGS (same quoting, elementwise runner only), BENCH_FAMILIES (default "elementwise gemm norm").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(demo tests bench)
B=build-gpu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
# Wheels the device lacks travel in .whl/ (carry it): nvidia-cutlass brings the CUTLASS headers.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBARACUDA_CUDA_ARCHS="${ARCHS:-90a}" -DBARACUDA_BUILD_PYTHON=ON \
  -DBARACUDA_BUILD_TESTS=OFF -DBARACUDA_BUILD_TOOLS=ON ${EXTRA_CMAKE:-} >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C $B -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" -A3 "$OUT/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH="$PWD/$B/python${PYTHONPATH:+:$PYTHONPATH}"
eval "pytest_extra=(${PYTEST_ARGS:-})"
eval "bench_extra=(${BENCH_ARGS:-})"
rc=0
for p in "${phases[@]}"; do
  case $p in
    demo) $B/tools/baracuda-demo 2>&1 | tee "$OUT/demo.txt" | tail -20 || rc=1 ;;
    tests)
      python3 -m pytest tests/gpu -q -rs -p no:cacheprovider "${pytest_extra[@]}" >"$OUT/pytest.log" 2>&1 || rc=1
      grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -60
      tail -3 "$OUT/pytest.log" ;;
    sanitizer)
      compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/gpu -q -m sanitizer \
        -p no:cacheprovider >"$OUT/sanitizer.log" 2>&1 || rc=1
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer.log" | tail -5 ;;
    bench)  # every family's runner (BENCH_FAMILIES, default all); BENCH_ARGS go to the elementwise one
      for fam in ${BENCH_FAMILIES:-elementwise gemm norm index loss quant ctc gguf}; do
        [ -f bench/bench_$fam.py ] || continue
        extra=(); [ "$fam" = elementwise ] && extra=("${bench_extra[@]}")
        python3 bench/bench_$fam.py "${extra[@]}" --out-dir "$OUT" 2>"$OUT/bench-$fam.err" | tail -40 || rc=1
      done ;;
    quickbench) python3 bench/bench_elementwise.py --quick --no-write 2>&1 | tail -30 || rc=1 ;;
  esac
done
exit $rc
