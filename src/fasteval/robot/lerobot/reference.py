"""LeRobot's own evaluation, called through its API: the reference for parity tests and benchmarks.

:func:`lerobot_eval` performs the steps of ``lerobot_eval.eval_main`` (seed, ``make_env``,
``make_policy``, ``make_pre_post_processors`` with the eval overrides, the env processors,
``eval_policy_all``) without argv parsing, videos or files, and returns the per-episode rows.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from fasteval.robot.env_kinds.headless import ensure_headless_gl
from fasteval.robot.lerobot.extra import require_lerobot


def lerobot_eval(folder: str | Path, n_episodes: int, batch_size: int, seed: int, device: str = "cpu",
                 env_type: str = "pusht", use_async_envs: bool = False, use_amp: bool = False,
                 rename_map: dict[str, str] | None = None, vector_env: Any = None,
                 max_episode_steps: int | None = None, **env_options: Any) -> dict[str, Any]:
    """Run LeRobot's ``eval_policy_all``; return ``{"per_episode": [...], "info": <its dict>, "eval_s": float}``.

    ``per_episode`` rows: ``episode_ix``, ``seed``, ``sum_reward``, ``max_reward``, ``success``,
    in LeRobot's order (seeds ``seed .. seed + n_episodes - 1``), of the first task; ``per_task``: one
    ``{"task_group", "task_id", "per_episode"}`` per task of a suite (``--env.task=a,b``), in LeRobot's order.
    ``vector_env``: run on this gymnasium vector env instead of the one LeRobot builds for ``env_type``
    (whose config still gives the policy's features and the env processors); it is closed at the end.
    ``max_episode_steps``: set the envs' ``_max_episode_steps`` (the step limit LeRobot's rollout reads)
    for env types whose config has no ``episode_length`` that reaches the env (Meta-World: 500).
    """
    require_lerobot("the LeRobot reference evaluation")
    ensure_headless_gl()  # before LeRobot's env modules import MuJoCo
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.envs.factory import make_env, make_env_config, make_env_pre_post_processors
    from lerobot.policies.factory import make_policy, make_pre_post_processors
    from lerobot.scripts.lerobot_eval import eval_policy_all
    from lerobot.utils.random_utils import set_seed

    rename_map = dict(rename_map or {})
    env_cfg = make_env_config(env_type, **env_options)
    policy_cfg = PreTrainedConfig.from_pretrained(str(folder))
    policy_cfg.pretrained_path = str(folder)
    policy_cfg.device = device
    with torch.random.fork_rng(devices=[]):
        set_seed(seed)
        if vector_env is not None:
            envs = {env_cfg.type: {0: vector_env}}
        else:
            envs = make_env(env_cfg, n_envs=batch_size, use_async_envs=use_async_envs)
        if max_episode_steps is not None:
            for vec in (v for tasks in envs.values() for v in tasks.values()):
                vec.set_attr("_max_episode_steps", [int(max_episode_steps)] * vec.num_envs)
        try:
            policy = make_policy(cfg=policy_cfg, env_cfg=env_cfg, rename_map=rename_map)
            policy.eval()
            pre, post = make_pre_post_processors(
                policy_cfg=policy_cfg, pretrained_path=str(folder),
                preprocessor_overrides={"device_processor": {"device": str(policy.config.device)},
                                        "rename_observations_processor": {"rename_map": rename_map}})
            env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=policy_cfg)
            amp = torch.autocast(device_type=torch.device(device).type) if use_amp else nullcontext()
            start = time.perf_counter()
            with torch.no_grad(), amp:
                info = eval_policy_all(envs=envs, policy=policy, env_preprocessor=env_pre, env_postprocessor=env_post,
                                       preprocessor=pre, postprocessor=post, n_episodes=n_episodes,
                                       max_episodes_rendered=0, videos_dir=None, return_episode_data=False,
                                       start_seed=seed, max_parallel_tasks=env_cfg.max_parallel_tasks)
            eval_s = time.perf_counter() - start
        finally:
            from lerobot.envs.utils import close_envs

            close_envs(envs)
    per_task = [{"task_group": t["task_group"], "task_id": t["task_id"], "per_episode": _rows(t["metrics"], seed)}
                for t in info.get("per_task", [])]
    rows = per_task[0]["per_episode"] if per_task else _rows(info, seed)
    return {"per_episode": rows, "per_task": per_task, "info": info, "eval_s": eval_s}


def _rows(metrics: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    return [{"episode_ix": i, "seed": seed + i, "sum_reward": float(s), "max_reward": float(m), "success": bool(ok)}
            for i, (s, m, ok) in enumerate(zip(metrics["sum_rewards"], metrics["max_rewards"], metrics["successes"]))]
