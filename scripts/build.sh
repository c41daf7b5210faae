#!/usr/bin/env bash
# Configures and builds baracuda in $BARACUDA_BUILD_DIR (default build/) with CMake + Ninja.
#   scripts/build.sh [ninja targets...]      (no target: everything)
# Environment:
#   BARACUDA_CUDA_ARCHS   GPU targets, default "90a;80" (sm_90a SASS + sm_80 SASS + PTX)
#   BARACUDA_JOBS         ninja -j (default: ninja's own choice)
#   BARACUDA_BUILD_DIR    build folder (default build)
#   PYTHON                interpreter the Python module is built for (default python3)
# The nanobind module (python/) is built when python/CMakeLists.txt exists and nanobind imports.
set -euo pipefail
cd "$(dirname "$0")/.."

CUDA_ROOT="${CUDA_HOME:-/usr/local/cuda}"
if ! command -v nvcc >/dev/null 2>&1 && [ -x "$CUDA_ROOT/bin/nvcc" ]; then export PATH="$CUDA_ROOT/bin:$PATH"; fi
export CUDACXX="${CUDACXX:-$(command -v nvcc)}"

PY="${PYTHON:-python3}"
BUILD_DIR="${BARACUDA_BUILD_DIR:-build}"
ARCHS="${BARACUDA_CUDA_ARCHS:-90a;80}"

cmake_args=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DBARACUDA_CUDA_ARCHS=$ARCHS")
py_ok() {
  "$PY" -c 'import os, sys, sysconfig, nanobind; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' >/dev/null 2>&1
}
if [ -f python/CMakeLists.txt ] && py_ok; then
  cmake_args+=(-DBARACUDA_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$("$PY" -c 'import sys; print(sys.executable)')")
else
  [ -f python/CMakeLists.txt ] && echo "[build] not building the Python module: $PY lacks nanobind or Python.h (scripts/install-deps.sh)"
  cmake_args+=(-DBARACUDA_BUILD_PYTHON=OFF)
fi

if [ -f "$BUILD_DIR/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD_DIR/CMakeCache.txt"; then
  echo "[build] $BUILD_DIR was configured with another generator; set BARACUDA_BUILD_DIR or remove it" >&2
  exit 1
fi
echo "[build] cmake ${cmake_args[*]}"
cmake "${cmake_args[@]}" >/dev/null
start=$(date +%s)
ninja -C "$BUILD_DIR" ${BARACUDA_JOBS:+-j "$BARACUDA_JOBS"} "$@"
echo "[build] done in $(( $(date +%s) - start )) s (archs $ARCHS)"
