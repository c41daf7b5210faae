#!/usr/bin/env bash
# Quick start, part 2: installs what is missing, builds everything (library, tools, host tests,
# Python module), runs the host tests (ctest, no GPU needed) and the Python tests (pytest;
# the GPU tests skip, with the reason shown, on a machine without a GPU). Ends with one
# summary line; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
BUILD_DIR="${BARACUDA_BUILD_DIR:-build}"
LOG_DIR="$BUILD_DIR/test-logs"

bash scripts/install-deps.sh || { echo "test.sh: FAIL (installing dependencies)"; exit 1; }
t0=$(date +%s)
bash scripts/build.sh || { echo "test.sh: FAIL (build, after $(( $(date +%s) - t0 )) s)"; exit 1; }
build_s=$(( $(date +%s) - t0 ))
mkdir -p "$LOG_DIR"

# ---- host tests (GoogleTest through ctest) ----------------------------------------------------------
ctest --test-dir "$BUILD_DIR" --output-on-failure ${BARACUDA_JOBS:+-j "$BARACUDA_JOBS"} 2>&1 | tee "$LOG_DIR/ctest.log"
ctest_rc=${PIPESTATUS[0]}
ctest_line="$(grep -E 'tests passed|No tests were found' "$LOG_DIR/ctest.log" | tail -1)"
[ -n "$ctest_line" ] || ctest_line="ctest exited with $ctest_rc"

# ---- Python tests (pytest) ---------------------------------------------------------------------------
py_dirs=()
for d in tests/gpu tests/host/python; do [ -d "$d" ] && py_dirs+=("$d"); done
py_status="not run"
py_rc=0
if [ ${#py_dirs[@]} -eq 0 ]; then
  py_status="skipped (no tests/gpu or tests/host/python)"
elif [ ! -d "$BUILD_DIR/python/baracuda" ]; then
  py_status="FAILED (the Python module was not built: is nanobind installed for $PY?)"
  py_rc=1
else
  # Import the module from the build tree.
  export PYTHONPATH="$PWD/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "[test] no GPU visible (nvidia-smi): GPU tests will be skipped"
  elif ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "[test] a GPU is visible but torch is not installed for $PY: GPU tests compare against torch and will skip (pip install torch)"
  fi
  "$PY" -m pytest "${py_dirs[@]}" -q -rs 2>&1 | tee "$LOG_DIR/pytest.log"
  py_rc=${PIPESTATUS[0]}
  # The last "N passed, M skipped in 0.1s" line (bare with -q, between '=' rules otherwise).
  py_summary="$(grep -E '(passed|failed|skipped|error|errors|no tests ran|deselected).* in [0-9.]+s' "$LOG_DIR/pytest.log" \
                | tail -1 | sed -E 's/^=+ //; s/ =+$//')"
  case $py_rc in
    0) py_status="passed: $py_summary" ;;
    5) # pytest's "no tests collected". Success only when that is because every module skipped
       # itself at import (no GPU / no torch: "N skipped"); an empty suite is a failure.
       # (Collection and usage errors have exit codes of their own.)
       if grep -qE 'skipped' <<<"$py_summary" && ! grep -qiE 'error' <<<"$py_summary"; then
         py_status="every test module skipped itself ($py_summary), counted as success"; py_rc=0
       else
         py_status="FAILED: pytest collected no tests (${py_summary:-no summary})"
       fi ;;
    *) py_status="FAILED (pytest exit $py_rc): $py_summary" ;;
  esac
fi

# ---- summary ------------------------------------------------------------------------------------------------
verdict=PASS
[ "$ctest_rc" -eq 0 ] || verdict=FAIL
[ "$py_rc" -eq 0 ] || verdict=FAIL
echo
echo "test.sh: $verdict | build ${build_s} s (archs ${BARACUDA_CUDA_ARCHS:-90a;80}) | host: $ctest_line | python: $py_status"
[ "$verdict" = PASS ]
