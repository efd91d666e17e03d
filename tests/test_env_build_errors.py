"""An env that cannot be built (its constructor raises, in this process or in an async worker, or a worker dies
while building it) is one line and exit 2, with nothing written (issue 42: it was a 30-line traceback)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fasteval import evaluate
from fasteval.doors.cli import main
from fasteval.types.errors import EnvBuildError, EnvStepError

ASYNC = ["--vectorization", "async", "--workers", "2", "-b", "2"]


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize("env, extra, needle", [
    ("tests.env_build_helpers:raises", [], "RuntimeError: cannot build: an asset is missing | second line"),
    ("fasteval.testing.faulty:FaultyEnv", ["--env-kwarg", "fault=bogus"], "ValueError: fault: expected one of"),
    ("tests.env_build_helpers:raises_in_worker", ASYNC, "worker 0 (slots 0..0) failed to build its envs: RuntimeError"),
    ("tests.env_build_helpers:dies_in_worker", ASYNC, "worker 0 (slots 0..0) failed to build its envs (died; exit code 3)"),
], ids=["sync-raises", "bad-kwarg-value", "worker-raises", "worker-dies"])
def test_an_env_that_cannot_be_built_is_one_line_and_exit_2(tmp_path, env, extra, needle):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", env, "--trust-remote-code", "-n", "2", *extra, "-o", str(out)])
    assert needle in one_error_line(result)
    assert not out.exists()


def test_the_library_api_raises_an_env_build_error_that_is_also_an_env_step_error():
    with pytest.raises(EnvBuildError, match="an asset is missing") as info:
        evaluate(env="tests.env_build_helpers:raises", trust_remote_code=True, n_episodes=1)
    assert isinstance(info.value, EnvStepError) and isinstance(info.value.__cause__, RuntimeError)
