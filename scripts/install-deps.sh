#!/usr/bin/env bash
# Installs what building and testing baracuda needs, and only what is missing:
#   apt:  cmake (>= 3.25), ninja-build, ccache, libgtest-dev, g++, python3 + pip
#   pip:  nanobind numpy pytest scikit-build-core (into the interpreter $PYTHON, default python3)
# The CUDA toolkit (nvcc) is expected in /usr/local/cuda or on PATH; it is not installed here.
# Idempotent: a second run installs nothing.
set -euo pipefail

PY="${PYTHON:-python3}"
log() { echo "[install-deps] $*"; }
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

# ---- apt ---------------------------------------------------------------------------------------
apt_pkgs=()
command -v cmake >/dev/null 2>&1 || apt_pkgs+=(cmake)
command -v ninja >/dev/null 2>&1 || apt_pkgs+=(ninja-build)
command -v ccache >/dev/null 2>&1 || apt_pkgs+=(ccache)
command -v g++ >/dev/null 2>&1 || apt_pkgs+=(g++)
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then apt_pkgs+=(libgtest-dev); fi
command -v "$PY" >/dev/null 2>&1 || apt_pkgs+=(python3)
if ! "$PY" -m pip --version >/dev/null 2>&1; then apt_pkgs+=(python3-pip); fi
# Python.h, for the nanobind module.
if ! "$PY" -c 'import os, sys, sysconfig; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' >/dev/null 2>&1; then
  apt_pkgs+=(python3-dev)
fi
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${apt_pkgs[*]} and no apt-get: install them by hand"; exit 1
  fi
  log "apt-get install ${apt_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}"
fi

# CMake >= 3.25 (Debian 12 ships 3.25.1); older distributions get it from PyPI.
cmake_ver="$(cmake --version | head -1 | awk '{print $3}')"
if [ "$(printf '%s\n' 3.25 "$cmake_ver" | sort -V | head -1)" != 3.25 ]; then
  log "cmake $cmake_ver < 3.25: pip install cmake"
  need_cmake_pip=1
fi

# ---- pip ----------------------------------------------------------------------------------------
pip_pkgs=()
for spec in nanobind:nanobind numpy:numpy pytest:pytest scikit_build_core:scikit-build-core \
  cutlass_library:nvidia-cutlass; do
  mod="${spec%%:*}"; pkg="${spec##*:}"
  "$PY" -c "import $mod" >/dev/null 2>&1 || pip_pkgs+=("$pkg")
done
[ -n "${need_cmake_pip:-}" ] && pip_pkgs+=("cmake>=3.25")
if [ ${#pip_pkgs[@]} -gt 0 ]; then
  pip_flags=(-q)
  # Debian's system Python refuses pip installs (PEP 668) unless told otherwise; a venv does not.
  if "$PY" -c 'import os, sys, sysconfig; m = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"); sys.exit(0 if os.path.exists(m) and sys.prefix == sys.base_prefix else 1)'; then
    pip_flags+=(--break-system-packages)
  fi
  log "pip install ${pip_pkgs[*]} (for $("$PY" -c 'import sys; print(sys.executable)'))"
  "$PY" -m pip install "${pip_flags[@]}" "${pip_pkgs[@]}"
fi

# ---- CUDA -------------------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  log "nvcc not found (looked on PATH and in ${CUDA_HOME:-/usr/local/cuda}/bin): install the CUDA toolkit"
  exit 1
fi
log "ok"
