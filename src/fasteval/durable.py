"""Run an engine into a :class:`~fasteval.rundir.RunDirectory`: durable, interruptible, resumable.

Used by the CLI. The sequence:

1. a new run writes ``manifest.json`` (status ``running``) before the first step; a resumed
   run checks that its spec and policy digest match the manifest, and runs only the episodes
   that are not in ``episodes.jsonl`` yet;
2. each finished episode is appended to ``episodes.jsonl`` and flushed at once;
3. the first SIGINT/SIGTERM stops starting new episodes (in-flight ones finish and are kept);
   a second one stops at once;
4. at the end, ``eval_info.json`` is written atomically from *all* recorded episodes (earlier
   segments included), and the manifest gets its final status.
"""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from fasteval.core.engine import Engine
from fasteval.errors import EvaluationAborted
from fasteval.results import EvalResult
from fasteval.rundir import RunDirectory, check_resumable, policy_digest
from fasteval.spec import EvalSpec

STATUS_RUNNING, STATUS_COMPLETE, STATUS_INTERRUPTED, STATUS_FAILED = "running", "complete", "interrupted", "failed"


@dataclass
class DurableOutcome:
    """What happened: the merged result, the final status, and the signal that stopped it (if any)."""

    result: EvalResult
    status: str
    signal_number: int | None = None
    error: BaseException | None = None
    resumed_episodes: int = 0
    notes: list[str] = field(default_factory=list)


def manifest_fields(spec: EvalSpec, engine: Engine) -> dict[str, Any]:
    import fasteval

    return {
        "env": spec.env,
        "env_kwargs": spec.env_kwargs,
        "policy": spec.to_dict()["policy"],
        "policy_digest": policy_digest(engine.policy, spec.policy),
        "seed": spec.seed,
        "n_episodes": spec.n_episodes,
        "max_steps": engine.max_steps,
        "batch_size": spec.batch_size,
        "vectorization": spec.vectorization,
        "fasteval_version": fasteval.__version__,
    }


class _StopOnSignal:
    """First SIGINT/SIGTERM: stop starting episodes. Second: raise KeyboardInterrupt (stop now)."""

    def __init__(self, engine: Engine, announce: Callable[[str], None]):
        self.engine, self.announce = engine, announce
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(f"second signal ({signal.Signals(signum).name})")
        self.received = signum
        self.engine.stop_starting()
        self.announce(f"{signal.Signals(signum).name} received: finishing the episodes in flight, starting no new ones "
                      f"(send it again to stop at once).")

    def __enter__(self) -> "_StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run_durable(
    engine: Engine,
    run_dir: RunDirectory,
    resume: bool = False,
    on_finished: Callable[[Any, Any], None] | None = None,
    announce: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> DurableOutcome:
    """Run ``engine.spec`` into ``run_dir`` (see the module docstring). Never loses a finished episode."""
    spec = engine.spec
    fields = manifest_fields(spec, engine)
    done: list[dict[str, Any]] = []
    segments: list[dict[str, Any]] = []
    if resume:
        manifest = run_dir.read_manifest()
        check_resumable(manifest, fields, run_dir.path)
        done = [r for r in run_dir.records() if 0 <= int(r["episode_ix"]) < spec.n_episodes]
        segments = list(manifest.get("segments", []))
    elif run_dir.has_manifest():
        from fasteval.errors import UserInputError

        raise UserInputError(
            f"{run_dir.path} already holds a fasteval run. Pass --resume {run_dir.path} to finish it, "
            f"or choose another --output-dir."
        )
    done_ix = {int(r["episode_ix"]) for r in done}
    missing = [i for i in range(spec.n_episodes) if i not in done_ix]
    run_dir.open_logs()
    run_dir.write_manifest({**fields, "spec": spec.to_dict(), "status": STATUS_RUNNING, "segments": segments})

    def log_finished(ledger: Any, rows: Any) -> None:
        run_dir.append_episodes(engine.record(ledger, int(r)) for r in rows)
        if on_finished is not None:
            on_finished(ledger, rows)

    error: BaseException | None = None
    with _StopOnSignal(engine, announce) as stopper:
        try:
            new = engine.run(episodes=missing, on_finished=log_finished,
                             on_error=lambda record: run_dir.append_errors([record]))
        except EvaluationAborted as exc:
            new, error = exc.partial, exc.__cause__ or exc
    run_dir.close()
    records = sorted(done + new.per_episode, key=lambda r: r["episode_ix"])
    if len(records) == spec.n_episodes and error is None and not new.n_failed:
        status = STATUS_COMPLETE  # a signal that came after the last episode changes nothing
    elif stopper.received is not None or isinstance(error, KeyboardInterrupt):
        status = STATUS_INTERRUPTED
    elif error is not None or new.n_failed:
        status = STATUS_FAILED
    else:
        status = STATUS_COMPLETE
    segments.append({"episodes": len(new.per_episode), "eval_s": new.eval_s, "status": status})
    merged = EvalResult(records, sum(s["eval_s"] for s in segments), new.timings, dict(new.meta),
                        video_paths=list(new.video_paths), errors=new.errors, n_failed=new.n_failed,
                        episode_data=new.episode_data)
    merged.meta.update(status=status, segments=len(segments), n_episodes=spec.n_episodes)
    run_dir.write_eval_info(merged.to_eval_info())
    run_dir.write_manifest({**fields, "spec": spec.to_dict(), "status": status, "segments": segments,
                            **({"error": f"{type(error).__name__}: {error}"} if error is not None else {})})
    return DurableOutcome(merged, status, stopper.received, error, resumed_episodes=len(done))
