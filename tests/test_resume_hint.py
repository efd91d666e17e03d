"""How a stopped run is finished, said once (issue 42): ``--trust-remote-code`` in the resume command exactly when
resuming needs it (fasteval's own env constructors, which ``--env.type`` names, do not), and the disk-full error
gives the same command as the end of the run."""

import errno
import os

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.rundir import resume_command
from fasteval.types.errors import UserInputError
from fasteval.types.spec import EvalSpec
from fasteval.types.trust import FASTEVAL_ENV_CONSTRUCTORS, check_env_ref, needs_trust_from_file

LEROBOT_ENV = "fasteval.robot.lerobot.envs:make_env"
FAULTY = "fasteval.testing.faulty:make_faulty_env"
MANIFEST = "the manifest 'x/manifest.json'"


def test_the_list_of_fastevals_env_constructors_is_the_robot_layers():
    from fasteval.robot.fast_envs import FAST_PUSHT
    from fasteval.robot.lerobot.envs import ENV_REF
    from fasteval.robot.metaworld import METAWORLD_ENV_REFS

    assert FASTEVAL_ENV_CONSTRUCTORS == {ENV_REF, FAST_PUSHT, *METAWORLD_ENV_REFS}


@pytest.mark.parametrize("env", sorted(FASTEVAL_ENV_CONSTRUCTORS))
def test_a_manifest_naming_fastevals_own_env_resumes_without_the_flag(tmp_path, env):
    check_env_ref(env, MANIFEST, False)  # no refusal
    assert not needs_trust_from_file(env, "zero")
    spec = EvalSpec(env=env, env_kwargs={"type": "libero", "task": "libero_spatial", "task_ids": [3]}, policy="zero")
    assert resume_command(tmp_path, spec) == f"fasteval --resume {tmp_path}"


@pytest.mark.parametrize(("env", "policy"), [(FAULTY, "zero"), ("CartPole-v1", "tests.helpers:three_logits"),
                                             ("this/Foo-v0", "zero")])
def test_code_a_file_cannot_choose_is_refused_and_the_resume_command_carries_the_flag(tmp_path, env, policy):
    assert needs_trust_from_file(env, policy)
    spec = EvalSpec(env=env, policy=policy)
    assert resume_command(tmp_path, spec) == f"fasteval --resume {tmp_path} --trust-remote-code"


def test_a_plain_run_resumes_without_the_flag(tmp_path):
    assert resume_command(tmp_path, EvalSpec(env="CartPole-v1", policy="zero")) == f"fasteval --resume {tmp_path}"


def test_the_disk_full_error_gives_the_runs_resume_command(tmp_path, monkeypatch):
    """A run whose env is a module:callable needs the flag to resume: both the end-of-run hint and the disk-full
    error say ``fasteval --resume DIR --trust-remote-code`` (the error used to leave the flag out)."""
    from fasteval.run.record_file import RecordFile

    real_write = RecordFile.write

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("episodes.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(RecordFile, "write", staticmethod(write))
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", FAULTY, "-n", "6", "-b", "2", "-o", str(out)])
    assert result.exit_code == 1, result.output
    command = f"fasteval --resume {out} --trust-remote-code"
    error = [line for line in result.output.splitlines() if "disk full while writing" in line]
    assert error and f"free some space and run `{command}`" in error[0], result.output
    assert f"Resume with:\n  {command}" in result.output


def test_the_write_error_names_the_folder_when_no_command_is_given(tmp_path):
    from fasteval.run.record_file import write_error

    message = str(write_error(tmp_path / "episodes.jsonl", OSError(errno.ENOSPC, "full"), tmp_path))
    assert f"run `fasteval --resume {tmp_path}`" in message
    with pytest.raises(UserInputError):
        check_env_ref("this/Foo-v0", MANIFEST, False)
