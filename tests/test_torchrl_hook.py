"""fasteval.integrations.torchrl.FastevalHook in a real (short) TorchRL training run: a Trainer with a collector, a
REINFORCE loss and TorchRL's CSVLogger; and the same hook in a hand-written loop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from tensordict.nn import TensorDictModule  # noqa: E402
from torch import nn  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import GymEnv  # noqa: E402
from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator  # noqa: E402
from torchrl.objectives import ReinforceLoss  # noqa: E402
from torchrl.record.loggers import CSVLogger  # noqa: E402
from torchrl.trainers import Trainer  # noqa: E402

from fasteval import evaluate  # noqa: E402
from fasteval.integrations.torchrl import FastevalHook  # noqa: E402
from fasteval.types.errors import UserInputError  # noqa: E402

BATCH_FRAMES, TOTAL_FRAMES, N_EVAL = 200, 1000, 6


def actor_and_loss():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["logits"]), in_keys=["logits"],
                               out_keys=["action"], distribution_class=OneHotCategorical, return_log_prob=True)
    value = ValueOperator(nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1)), in_keys=["observation"])
    return actor, ReinforceLoss(actor, value)


def read_scalars(logger: CSVLogger, name: str) -> list[tuple[int, float]]:
    path = logger.experiment.log_dir
    with open(f"{path}/scalars/{name}.csv") as f:
        return [(int(step), float(value)) for step, value in (line.strip().split(",") for line in f if line.strip())]


def test_trainer_hook_evaluates_every_batch_with_one_engine_and_logs_through_torchrls_logger(tmp_path):
    actor, loss = actor_and_loss()
    made = []

    def eval_env():
        made.append(1)
        return GymEnv("CartPole-v1")

    logger = CSVLogger("exp", str(tmp_path))
    trainer = Trainer(collector=Collector(GymEnv("CartPole-v1"), actor, frames_per_batch=BATCH_FRAMES,
                                          total_frames=TOTAL_FRAMES),
                      total_frames=TOTAL_FRAMES, frame_skip=1, optim_steps_per_batch=1, loss_module=loss,
                      optimizer=torch.optim.Adam(loss.parameters(), 1e-2), logger=logger, progress_bar=False)
    hook = FastevalHook(env=eval_env, policy=actor, interval=1, n_episodes=N_EVAL, batch_size=3, seed=50)
    hook.register(trainer)
    trainer.train()

    steps = [s for s, _ in hook.history]
    assert steps == list(range(BATCH_FRAMES, TOTAL_FRAMES + 1, BATCH_FRAMES))
    assert len(made) == 3  # one env per slot, built once for the whole run
    assert hook.evaluator is None  # closed at the trainer's shutdown
    logged = read_scalars(logger, "eval/avg_sum_reward")
    assert logged == [(s, scalars["eval/avg_sum_reward"]) for s, scalars in hook.history]
    assert len({v for _s, v in logged}) > 1  # training changed the policy between evaluations
    final = evaluate(env=lambda: GymEnv("CartPole-v1"), policy=actor, n_episodes=N_EVAL, batch_size=N_EVAL, seed=50)
    assert final.overall()["avg_sum_reward"] == logged[-1][1]  # the last evaluation saw the final weights
    assert hook.last_result.meta["exploration"] == "deterministic"


def test_hand_written_loop_pattern(tmp_path):
    actor, loss = actor_and_loss()
    optimizer = torch.optim.Adam(loss.parameters(), 1e-2)
    logger = CSVLogger("loop", str(tmp_path))
    hook = FastevalHook(env="CartPole-v1", policy=actor, interval=2, logger=logger, n_episodes=4, batch_size=4)
    frames = 0
    for batch in Collector(GymEnv("CartPole-v1"), actor, frames_per_batch=100, total_frames=400):
        optimizer.zero_grad()
        losses = loss(batch)
        sum(v for k, v in losses.items() if k.startswith("loss")).backward()
        optimizer.step()
        frames += batch.numel()
        hook.step(frames)
    hook.close()
    assert [s for s, _ in hook.history] == [200, 400]
    assert read_scalars(logger, "eval/avg_length") == [(s, v["eval/avg_length"]) for s, v in hook.history]


def test_bad_interval():
    with pytest.raises(UserInputError, match="interval"):
        FastevalHook(env="CartPole-v1", policy="zero", interval=0)
