#!/usr/bin/env bash
# Install fasteval in editable mode, with optional extras: scripts/install.sh [test,bench,...]
# Uses the torch that is already installed; otherwise installs the CPU wheel torch==2.13.0
# first, so that pip never pulls a multi-GB CUDA build as a dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
extras="${1:-}"
target="."
[ -n "$extras" ] && target=".[${extras}]"
python -m pip install -q -e "$target"
