"""``fasteval serve POLICY``: serve a policy over websockets, in openpi's protocol and fasteval's.

\b
  fasteval serve src/fasteval/assets/cartpole_mlp --port 8000
  fasteval --policy ws://127.0.0.1:8000 --env CartPole-v1 -n 100        # another shell, or machine
  fasteval serve --policy.path=outputs/act --env.type=pusht --port 8000  # LeRobot, in its own Python

POLICY is anything ``--policy`` loads (fasteval checkpoints, ``module:callable`` with
``--trust-remote-code``, LeRobot folders and hub ids through the ``lerobot`` extra); LeRobot-style
flags (``--policy.path``, ``--env.type``, ``--policy.device``) are accepted as the main command accepts them.
A fasteval client (``--policy ws://HOST:PORT``) sends its spaces and spec: ``--env`` is not needed for
it. openpi clients (openpi-client's ``WebsocketClientPolicy``, ``--policy openpi+ws://...``) need the
server to know the spaces: give ``--env``.

Exit codes: 0 stopped by SIGINT/SIGTERM; 2 bad input (an unusable policy or env, a non-local
``--host`` without ``--token``, a port in use). See docs/serving.md.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

import click

from fasteval.doors.click_types import DEVICE, FiniteFloatRange
from fasteval.doors.serve_budget import DEFAULT_MAX_INFLIGHT_MB, MB
from fasteval.types.spec import OBS_DTYPES, OBSERVATION_FORMATS, RESET_MODES

TOKEN_ENV = "FASTEVAL_SERVE_TOKEN"
"""The environment variable that holds the token, on the server (instead of ``--token``) and on clients."""


def is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServeCommand(click.Command):
    """``serve`` with the main command's LeRobot aliases (``--policy.path``, ``--env.type``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from fasteval.doors.compat import rewrite_args

        args = list(args)
        if args and not args[0].startswith("-") and "=" not in args[0]:
            args[0] = f"--policy={args[0]}"  # the positional POLICY
        try:
            args = rewrite_args(args, self.get_params(ctx))
        except ValueError as exc:
            if not ctx.resilient_parsing:
                raise click.UsageError(str(exc), ctx) from None
        return super().parse_args(ctx, args)


@click.command(cls=ServeCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--policy", "-p", "policy", required=True, metavar="POLICY",
              help="What to serve (also the first argument): a checkpoint folder, module:callable, a LeRobot folder.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but a loopback address needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free port).")
@click.option("--device", type=DEVICE, default="auto", show_default=True, help="Policy device: cpu, cuda, cuda:N or auto.")
@click.option("--max-batch", type=click.IntRange(min=1), default=16, show_default=True,
              help="openpi requests batched into one policy call, at most.")
@click.option("--max-wait-ms", type=FiniteFloatRange(min=0), default=2.0, show_default=True,
              help="Longest wait for more openpi requests after the first of a batch.")
@click.option("--token", default=None, help=f"Clients must send it (Authorization: Api-Key TOKEN) [default: ${TOKEN_ENV}].")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow code: POLICY or --env path/to/file.py:callable (runs that file), any module:callable --env.")
@click.option("--env", "-e", default=None, help="An env whose spaces openpi requests follow (fasteval clients send theirs).")
@click.option("--env-kwarg", "env_kwargs", multiple=True, metavar="KEY=VALUE", help="Keyword argument for --env; repeatable.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, hidden=True)  # from --env.type; clients cap episodes
@click.option("--obs-format", "observation_format", type=click.Choice(OBSERVATION_FORMATS), default="raw",
              show_default=True, help="What the policy receives for openpi requests (fasteval clients send theirs).")
@click.option("--rename", multiple=True, metavar="KEY=NEW", help="Rename an observation key (openpi requests).")
@click.option("--obs-dtype", type=click.Choice(OBS_DTYPES), default="auto", show_default=True, help="Observation dtype (openpi).")
@click.option("--reset-mode", type=click.Choice(RESET_MODES), default="auto", hidden=True)
@click.option("--amp", type=click.Choice(["none", "bf16", "fp16", "auto"]), default="none", show_default=True,
              help="Autocast for openpi requests (fasteval clients send their --amp).")
@click.option("--cuda-graph/--no-cuda-graph", "cuda_graph", default=None,
              help="Capture the policy step per padded batch shape [default: on where CUDA exists].")
@click.option("--cpu-threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="torch intra-op threads of a CPU policy (the evaluator's default is 1 too).")
@click.option("--max-message-mb", type=FiniteFloatRange(min=0, min_open=True), default=256.0, show_default=True,
              help="Largest message accepted; a bigger one closes that connection.")
@click.option("--max-inflight-mb", type=FiniteFloatRange(min=0, min_open=True), default=DEFAULT_MAX_INFLIGHT_MB,
              show_default=True,
              help="Memory held for requests across all connections (at least --max-message-mb; the server holds at "
                   "most this plus one message); past it, connections wait until answered requests free memory.")
@click.option("--session-ttl", type=FiniteFloatRange(min=0), default=300.0, show_default=True,
              help="Seconds a fasteval session is kept after its connection dropped (the client may resume it).")
@click.option("--batch-sessions", "batch_sessions_ms", type=FiniteFloatRange(min=0), default=None, metavar="MAX_WAIT_MS",
              help="Merge the step requests of fasteval sessions (client engines) into one policy call, waiting at most "
                   "MAX_WAIT_MS for the others; policies with per-slot state are still called per session "
                   "[default: off].")
def serve(policy: str, host: str, port: int, device: str, max_batch: int, max_wait_ms: float, token: str | None,
          trust_remote_code: bool, env: str | None, env_kwargs: tuple[str, ...], max_steps: int | None,
          observation_format: str, rename: tuple[str, ...], obs_dtype: str, reset_mode: str, amp: str,
          cuda_graph: bool | None, cpu_threads: int, max_message_mb: float, max_inflight_mb: float,
          session_ttl: float, batch_sessions_ms: float | None) -> None:
    """Serve POLICY to evaluators over websockets (openpi's protocol and fasteval's batched one)."""
    from fasteval.doors.cli import EXIT_BAD_INPUT, fail, parse_env_kwargs, parse_renames
    from fasteval.types.errors import UserInputError

    token = token or os.environ.get(TOKEN_ENV) or None
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # --host [::1]
    if not is_local(host) and token is None:
        fail(f"--host {host} is not a loopback address: anyone who can reach it could use the policy. Give --token "
             f"(or ${TOKEN_ENV}); clients then set ${TOKEN_ENV} too.", EXIT_BAD_INPUT)
    try:
        import msgpack  # noqa: F401
        import websockets  # noqa: F401
    except ImportError as exc:
        fail(f"fasteval serve needs the serve extra ({exc.name} is missing): ./scripts/install.sh serve.", EXIT_BAD_INPUT)
    if max_inflight_mb < max_message_mb:
        fail(f"--max-inflight-mb {max_inflight_mb:g} is below --max-message-mb {max_message_mb:g}: the bound on all "
             f"requests together must hold one message. Give --max-inflight-mb {max_message_mb:g} or more.", EXIT_BAD_INPUT)
    try:
        config = build_config(policy, host, port, device, max_batch, max_wait_ms, token, trust_remote_code, env,
                              parse_env_kwargs(env_kwargs), observation_format, parse_renames(rename), obs_dtype,
                              reset_mode, amp, cuda_graph, int(max_message_mb * MB), session_ttl,
                              max_inflight_bytes=int(max_inflight_mb * MB), batch_sessions_ms=batch_sessions_ms)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    import torch

    torch.set_num_threads(cpu_threads)
    sys.exit(run_server(config))


def build_config(policy: str, host: str, port: int, device: str, max_batch: int, max_wait_ms: float,
                 token: str | None, trust_remote_code: bool, env: str | None, env_kwargs: dict[str, Any],
                 observation_format: str, rename: dict[str, str], obs_dtype: str, reset_mode: str, amp: str,
                 cuda_graph: bool | None, max_message_bytes: int, session_ttl_s: float,
                 max_inflight_bytes: int | None = None, batch_sessions_ms: float | None = None) -> Any:
    """The server's config; checks the policy reference and the env before anything binds (UserInputError)."""
    from fasteval.doors.serve_policy import RunnerOptions
    from fasteval.doors.serve_server import ServerConfig
    from fasteval.robot.policies.remote import is_remote_ref
    from fasteval.types.errors import UserInputError

    if is_remote_ref(policy):
        raise UserInputError(f"POLICY {policy!r} is a server address; fasteval serve serves a policy it loads itself.")
    options = RunnerOptions(policy=policy, device=device, trust_remote_code=trust_remote_code,
                            observation_format=observation_format, rename=rename, obs_dtype=obs_dtype,
                            reset_mode=reset_mode, env=env, env_kwargs=env_kwargs, amp=amp, cuda_graph=cuda_graph)
    spaces = None
    if env is not None:
        from fasteval.core.envs import make_factory
        from fasteval.robot.env_kinds import ENV_KINDS
        from fasteval.types.trust import COMMAND_LINE, check_env_ref

        check_env_ref(env, COMMAND_LINE, trust_remote_code)  # the rules of the main command (docs/security.md)
        _factory, probe, _cap = make_factory(env, env_kwargs, None, trust_remote_code, kinds=ENV_KINDS)
        spaces = (probe.observation_space, probe.action_space)
        probe.close()
        from fasteval.doors.serve_policy import ServedRunner

        ServedRunner(options, *spaces, 1)  # load it once now: a bad POLICY is an exit 2 before the port opens
    else:  # without --env the policy is loaded per fasteval session, for the spaces that client sends
        check_policy_ref(policy, trust_remote_code)
    bound = {} if max_inflight_bytes is None else {"max_inflight_bytes": max_inflight_bytes}
    return ServerConfig(options=options, host=host, port=port, token=token, max_batch=max_batch,
                        max_wait_ms=max_wait_ms, max_message_bytes=max_message_bytes, session_ttl_s=session_ttl_s,
                        openpi_spaces=spaces, batch_sessions_ms=batch_sessions_ms, **bound)


def check_policy_ref(policy: str, trust_remote_code: bool) -> None:
    """What can be checked of POLICY without the spaces: that it names something loadable (UserInputError)."""
    from pathlib import Path

    from fasteval.robot.policies.builtin import BUILTIN_POLICIES
    from fasteval.robot.policies.hub import is_hf_ref
    from fasteval.types.errors import UserInputError
    from fasteval.types.refs import resolve_callable, split_callable_ref

    if policy in BUILTIN_POLICIES or is_hf_ref(policy) or Path(policy).is_dir():
        return
    if split_callable_ref(policy) is not None:
        resolve_callable(policy, what="policy", trust_remote_code=trust_remote_code)
        return
    raise UserInputError(f"POLICY {policy!r}: expected zero, random, a checkpoint folder, a LeRobot folder, hf://org/repo "
                         f"or module:callable; no such folder exists and it is not of the form module:callable.")


def run_server(config: Any) -> int:
    """Run until SIGINT/SIGTERM; print the address once it listens. Returns the exit code."""
    import asyncio
    import signal

    from fasteval.doors.serve_server import PolicyServer

    server = PolicyServer(config)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))

        def ready(port: int) -> None:
            auth = " (token required)" if config.token else ""
            url = server_url(config.host, port)
            click.echo(f"fasteval serve: serving {config.options.policy} on {url}{auth}", err=True)
            click.echo(url, nl=True)
            sys.stdout.flush()

        await server.serve(ready=ready, stop=stop)

    try:
        asyncio.run(main())
    except OSError as exc:
        click.echo(f"Error: cannot listen on {server_url(config.host, config.port)[5:]}: {exc}. Choose another --port.",
                   err=True)
        return 2
    return 0


def server_url(host: str, port: int) -> str:
    """``ws://HOST:PORT``, an IPv6 host in brackets (``ws://[::1]:8000``) as URLs write it (RFC 3986)."""
    try:
        bracket = ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        bracket = False
    return f"ws://[{host.strip('[]')}]:{port}" if bracket else f"ws://{host}:{port}"


if __name__ == "__main__":
    serve()
