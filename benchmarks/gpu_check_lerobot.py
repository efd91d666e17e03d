"""The bench_lerobot rows on a GPU day (a 16-core GPU machine; under 4 minutes): LeRobot's own eval
(sync envs) against fasteval wave / continuous with sync and async envs, and the env-only floor.

Needs the ``lerobot`` extra in the machine's Python >= 3.12 (``scripts/lerobot_env.sh`` builds it;
the GPU machine cannot reach a package registry, so it must be there already). Target: >= 8x LeRobot.

    python benchmarks/gpu_check_lerobot.py [--json gpu_lerobot.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_lerobot  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        device = "cpu"
    # 32 episodes at batch 16: two waves of PushT's 300 steps; LeRobot's sync row dominates (~16 cores idle).
    return bench_lerobot.main(["--device", device, "--episodes", "32", "--batch", "16", *argv])


if __name__ == "__main__":
    sys.exit(main())
