#!/usr/bin/env bash
# Build, or reuse, a small environment with openpi-client from the package registry, for the interop
# test of `fasteval serve` (tests/test_serve_openpi.py).
#
#   scripts/openpi_client_env.sh      # prints the environment's python on its last line
#
# openpi-client 0.1.2 pins numpy < 2 and does not declare typing_extensions (its websocket client
# imports it), so it gets a virtual environment of its own instead of the main one. It lives outside
# the checkout, in ${FASTEVAL_OPENPI_VENV:-$XDG_CACHE_HOME/fasteval/openpi-client}, and is reused when
# its stamp matches the requirements below. Exit 3: no usable Python (the test then skips).
set -euo pipefail

cd "$(dirname "$0")/.."

REQS=("openpi-client==0.1.2" "typing_extensions>=4" "websockets>=12,<18" "msgpack>=1.0")
VENV="${FASTEVAL_OPENPI_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fasteval/openpi-client}"
source scripts/venv_lib.sh
reuse_venv "$VENV" "${REQS[@]}" && exit 0

py="${FASTEVAL_OPENPI_PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3.12 python3.10 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import venv' 2>/dev/null; then
      py="$(command -v "$cand")"; break
    fi
  done
fi
if [ -z "$py" ]; then
  echo "no Python with venv found" >&2
  exit 3
fi
build_venv "$VENV" "$py" "${REQS[@]}"
