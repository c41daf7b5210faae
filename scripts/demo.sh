#!/usr/bin/env bash
# Quick start, part 1: installs what is missing, builds the library and runs the demo.
# With a GPU the demo times a few plans on 16M elements and checks one result; without one it
# shows the plans select() would choose for sm_90. See README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh baracuda-demo baracuda-info
exec "${BARACUDA_BUILD_DIR:-build}/tools/baracuda-demo" "$@"
