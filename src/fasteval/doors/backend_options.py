"""``--backend local|ray`` and the Ray backend's options (docs/distributed.md): where a run's episodes run.

``local`` (the default) is the engine in this process (its envs in-process or in a local worker pool);
``ray`` keeps the ledger, the run folder and the record here and runs the episodes on Ray actors
(:class:`fasteval.run.ray_engine.RayEngine`).
"""

from __future__ import annotations

from typing import Any

import click

BACKENDS = ("local", "ray")

BACKEND_OPTIONS = [
    click.option("--backend", "backend", type=click.Choice(BACKENDS), default="local", show_default=True,
                 help="Where the episodes run: here, or on Ray actors over a cluster's nodes (the ledger, run folder "
                      "and record stay here; results identical per episode). docs/distributed.md."),
    click.option("--address", "ray_address", default=None, metavar="ADDRESS",
                 help="--backend ray: the cluster to join (auto, HOST:PORT, ray://HOST:PORT) [default: the running "
                      "Ray instance, else a new local one]."),
    click.option("--ray-workers", "ray_workers", type=click.IntRange(min=1), default=None,
                 help="--backend ray: worker actors, each with its own engine [default: the cluster's CPUs // "
                      "--num-cpus]."),
    click.option("--num-cpus", "ray_num_cpus", type=click.FloatRange(min=0), default=1.0, show_default=True,
                 help="--backend ray: CPUs each worker actor reserves."),
    click.option("--num-gpus", "ray_num_gpus", type=click.FloatRange(min=0), default=0.0, show_default=True,
                 help="--backend ray: GPUs each worker actor reserves (its policy runs there)."),
    click.option("--ship-policy/--no-ship-policy", "ray_ship_policy", default=True, show_default=True,
                 help="--backend ray: send a checkpoint folder to each worker by Ray's object store (digest "
                      "checked), so nodes need not share its path."),
    click.option("--ray-block", "ray_block", type=click.IntRange(min=1), default=None,
                 help="--backend ray: episodes per lease (a worker runs them, then returns their rows) "
                      "[default: the batch size]."),
    click.option("--ray-policy-actors", "ray_policy_actors", type=click.IntRange(min=1), default=None,
                 help="--backend ray: N shared policy actors (fasteval serve in Ray actors, --num-gpus each) that "
                      "every env worker calls, instead of a policy in each worker [default: none]."),
]
OPTION_NAMES = ("backend", "ray_address", "ray_workers", "ray_num_cpus", "ray_num_gpus", "ray_ship_policy", "ray_block",
                "ray_policy_actors")
"""The parameter names of :data:`BACKEND_OPTIONS` (``--help``'s section)."""


CONFIG_PARAMS = {"backend": "backend", "address": "ray_address", "ray_workers": "ray_workers",
                 "num_cpus": "ray_num_cpus", "num_gpus": "ray_num_gpus", "ray_block": "ray_block",
                 "ship_policy": "ray_ship_policy", "ray_policy_actors": "ray_policy_actors"}
"""A config file's backend key (:data:`fasteval.run.config.BACKEND_DEFAULTS`) -> the CLI parameter it sets."""


def backend_with_config(ctx: Any, backend: dict[str, Any], config_file: Any) -> dict[str, Any]:
    """``backend`` (the command line's) with ``--config``'s backend keys applied where the command line gave
    none (the command line wins, as for every other key); a bad value is a ConfigError (exit 2)."""
    from click.core import ParameterSource

    from fasteval.run.config import backend_config, load_config

    def given(param: str) -> bool:
        return ctx.get_parameter_source(param) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)

    out = dict(backend)
    for key, value in backend_config(load_config(config_file), f"config file {str(config_file)!r}").items():
        if not given(CONFIG_PARAMS[key]):
            out[CONFIG_PARAMS[key]] = value
    if given("backend") and out["backend"] == "local":  # --backend local over a file's Ray run: its Ray keys go too
        return {**out, **{p: backend[p] for p in CONFIG_PARAMS.values()}}
    return out


def backend_keys(backend: dict[str, Any]) -> dict[str, Any]:
    """The CLI's backend options as a config file's keys (what ``config.json`` saves of a run on Ray)."""
    return {key: backend[param] for key, param in CONFIG_PARAMS.items()}


def backend_options(fn: Any) -> Any:
    for option in reversed(BACKEND_OPTIONS):
        fn = option(fn)
    return fn


def pop_backend(options: dict[str, Any]) -> dict[str, Any]:
    """Take the backend's options out of ``options`` (the rest build the spec)."""
    return {name: options.pop(name) for name in OPTION_NAMES}


def build_run_engine(spec: Any, backend: dict[str, Any], build_local: Any) -> Any:
    """The engine of a one-task run: ``build_local(spec)`` for ``--backend local``, a
    :class:`~fasteval.run.ray_engine.RayEngine` for ``--backend ray``. UserInputError (exit 2) for Ray options
    without ``--backend ray``."""
    from fasteval.types.errors import UserInputError

    if backend["backend"] != "ray":
        flags = {"ray_address": "--address", "ray_workers": "--ray-workers", "ray_block": "--ray-block",
                 "ray_policy_actors": "--ray-policy-actors"}
        given = [flag for name, flag in flags.items() if backend[name] is not None]
        if given or backend["ray_num_gpus"] or backend["ray_num_cpus"] != 1.0:
            raise UserInputError(f"{', '.join(given) or '--num-cpus/--num-gpus'}: options of --backend ray; this run's "
                                 f"backend is local. Add --backend ray, or drop them.")
        return build_local(spec)
    from fasteval.run.ray_engine import RayEngine, RayOptions

    servers, gpus = None, backend["ray_num_gpus"]
    if backend["ray_policy_actors"]:  # the policy (and its GPUs) in shared actors, not in the env workers
        from fasteval.doors.ray_policy_actors import RayPolicyServers

        servers = RayPolicyServers(spec, backend["ray_policy_actors"], address=backend["ray_address"], num_gpus=gpus,
                                   ship_policy=backend["ray_ship_policy"])
        gpus = 0.0
    try:
        return RayEngine(spec, RayOptions(address=backend["ray_address"], workers=backend["ray_workers"],
                                          num_cpus=backend["ray_num_cpus"], num_gpus=gpus,
                                          block=backend["ray_block"], ship_policy=backend["ray_ship_policy"]),
                         policy_servers=servers)
    except BaseException:
        if servers is not None:
            servers.close()
        raise
