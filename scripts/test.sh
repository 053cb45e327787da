#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (gpu tests report
# themselves skipped without a GPU). Safe to run again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/deps.sh"
bash "$root/scripts/build.sh"
cd "${PACO_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${PACO_JOBS:-$(nproc)}" "$@"
