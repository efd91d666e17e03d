"""LeRobot policies served by `fasteval serve`, in this (LeRobot) environment: per seed equal to the
in-process run, for ACT (action chunks, per-slot queues) and DDPM Diffusion (observation history and
per-episode noise generators, all on the server), with and without --pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lerobot.conftest import pusht_spec
from tests.lerobot.test_act import rows

pytest.importorskip("lerobot")
pytest.importorskip("websockets")

from fasteval import evaluate  # noqa: E402
from tests.serve_helpers import ServerProcess  # noqa: E402

STEPS = 20


@pytest.mark.parametrize("which,batch,pipeline", [("act_checkpoint", 3, False), ("ddpm_checkpoint", 2, False),
                                                  ("ddpm_checkpoint", 4, True)],
                         ids=["act-b3", "ddpm-b2", "ddpm-b4-pipeline"])
def test_served_lerobot_policy_equals_in_process(which: str, batch: int, pipeline: bool,
                                                 request: pytest.FixtureRequest) -> None:
    pytest.importorskip("diffusers")
    folder: Path = request.getfixturevalue(which)
    local = rows(evaluate(**pusht_spec(folder, n_episodes=4, batch_size=batch, max_steps=STEPS)))
    with ServerProcess(f"--policy.path={folder}") as server:
        fields = pusht_spec(server.url, n_episodes=4, batch_size=batch, max_steps=STEPS)
        if pipeline:
            fields.update(vectorization="async", workers=2, pipeline=True)  # in-process refuses a stateful policy
        served = evaluate(**fields)
    assert rows(served) == local
    assert served.meta["server_lerobot_policy_type"] in ("act", "diffusion")
