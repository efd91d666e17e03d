"""CLI tests with click's CliRunner: happy path, eval_info.json layout, and bad input (exit 2)."""

import json
import math

import click
import pytest
import torch
from click.testing import CliRunner

from fasteval.doors.cli import main, parse_env_kwargs
from fasteval.testing import expected_episode
from fasteval.testing.faulty import FaultyEnv

KA = "fasteval/KnownAnswer-v0"


def run(args, **kwargs):
    return CliRunner().invoke(main, args, catch_exceptions=False, **kwargs)


def test_known_answer_run_writes_exact_eval_info(tmp_path):
    result = run(["--env", KA, "--policy", "zero", "-n", "11", "-b", "4", "--seed", "3", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert set(info) >= {"per_episode", "per_task", "per_group", "overall"}
    expected = [expected_episode(3 + i) for i in range(11)]
    got = info["per_episode"]
    assert [e["episode_ix"] for e in got] == list(range(11))
    for record, exp in zip(got, expected):
        for key in ("seed", "sum_reward", "max_reward", "length", "success"):
            assert record[key] == exp[key], (key, record, exp)
    overall = info["overall"]
    assert overall["n_episodes"] == 11
    assert overall["avg_sum_reward"] == pytest.approx(sum(e["sum_reward"] for e in expected) / 11)
    assert overall["pc_success"] == pytest.approx(100 * sum(e["success"] for e in expected) / 11)
    for key in ("avg_max_reward", "eval_s", "eval_ep_s", "env_steps", "steps_per_s", "episodes_per_s"):
        assert key in overall
    assert info["per_group"][KA]["n_episodes"] == 11
    assert info["per_task"][0]["metrics"]["sum_rewards"] == [e["sum_reward"] for e in expected]
    assert "avg_sum_reward" in result.output


def test_env_kwargs_are_parsed_as_json(tmp_path):
    result = run(["--env", KA, "-n", "4", "--seed", "0", "--env-kwarg", "nan_reward_seeds=[2]", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert math.isnan(info["per_episode"][2]["sum_reward"])
    assert info["overall"]["n_nan_reward_episodes"] == 1
    assert "NaN-reward episodes" in result.output


def test_parse_env_kwargs():
    assert parse_env_kwargs(("a=1", "b=[1, 2]", "c=hello", "d=true", "e={\"x\": 1}")) == {
        "a": 1, "b": [1, 2], "c": "hello", "d": True, "e": {"x": 1}}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--env", "CartPoel-v1"], "Did you mean"),
        (["--env", "nosuchplugin_xyz/Thing-v0"], "nosuchplugin_xyz"),
        (["--env", KA, "--policy", "no/such/folder"], "expected 'zero', 'random'"),
        (["--env", KA, "--policy", "fasteval.testing.policies:NoSuchThing"], "has no attribute"),
        (["--env", KA, "--policy", "some/file.py:make"], "--trust-remote-code"),
        (["--env", KA, "--env-kwarg", "novalue"], "key=value"),
        (["--env", KA, "-n", "0"], "0"),
        (["--env", KA, "--vectorization", "threads"], "threads"),
        (["--env", KA, "--env-kwarg", "bogus_kwarg=1"], "bogus_kwarg"),
    ],
)
def test_bad_input_exits_2_with_a_message(args, needle, tmp_path):
    result = CliRunner().invoke(main, [*args, "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


def test_action_shape_mismatch_names_both_shapes(tmp_path):
    # CartPole has Discrete(2) actions; a 3-logit module does not fit.
    result = CliRunner().invoke(main, ["--env", KA, "--policy", "tests.helpers:three_logits", "-b", "4", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "(4, 3)" in result.output and "(4, 2)" in result.output


def test_policy_that_raises_on_dry_run_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["--env", KA, "--policy", "tests.helpers:raising_policy", "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "dry run" in result.output


def _help_entries(text: str) -> dict[str, str]:
    """``--help``'s option entries by long name (``--batch-size`` -> its whole entry, one line)."""
    import re

    entries: dict[str, str] = {}
    current: list[str] = []
    for line in text.splitlines():
        if re.match(r"^  -", line):
            current = [line.strip()]
            for name in re.findall(r"(--[a-z][a-z0-9-]*)(?![\w.=])", line.split("  ", 2)[1].split(" [")[0]):
                entries[name] = current  # type: ignore[assignment]
        elif line.startswith("    ") and current:
            current.append(line.strip())
        else:
            current = []
    return {name: " ".join(lines) for name, lines in entries.items()}


def test_help_shows_the_default_of_every_option_that_has_one():
    """Every option with a default shows that value in ``--help`` (``show_default=True``: GUIDE, the CLI
    is strict and says what it does); an option whose default depends on the run says so in words."""
    result = run(["--help"])
    assert result.exit_code == 0
    entries = _help_entries(result.output)
    missing = []
    for param in main.params:
        if not isinstance(param, click.Option) or param.name in ("help", "version") or not param.expose_value:
            continue
        long_name = next(o for o in param.opts if o.startswith("--"))
        entry = entries[long_name]
        if param.is_flag and param.secondary_opts and param.default is not None:  # --report/--no-report
            shown = f"[default: {(param.opts if param.default else param.secondary_opts)[0].lstrip('-')}"
        elif param.is_flag or param.multiple or param.default is None:
            continue  # off unless given (a flag, a repeatable option, --resume, --stop-when, ...)
        else:
            shown = f"[default: {param.default}"
        if shown not in entry:
            missing.append(f"{long_name}: expected {shown!r} in {entry!r}")
    for words in ("--workers", "--max-steps", "--cuda-graph", "--policy-timeout", "--output-dir"):
        assert "[default: " in entries[words], words  # no click default: the help says what happens
    assert not missing, "\n".join(missing)


def test_help_puts_every_option_under_one_heading_by_purpose():
    from fasteval.doors.cli import HELP_SECTIONS

    result = run(["--help"])
    assert result.exit_code == 0
    names = [name for section in HELP_SECTIONS for name in section.options]
    options = {p.name for p in main.params if isinstance(p, click.Option)} - {"help", "version"}
    assert sorted(names) == sorted(options), "each option of `fasteval` under exactly one HELP_SECTIONS heading"
    titles = [line.rstrip(":") for line in result.output.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == ["What to evaluate", "How it runs", "Many machines", "Outputs", "Faults and limits", "Statistics", "LeRobot names",
                      "Other options", "Commands"]
    lerobot = result.output.split("LeRobot names:")[1].split("Other options:")[0]
    for name in ("--policy.path", "--env.type", "--eval.n_episodes", "--eval.batch_size", "--policy.device", "--noise"):
        assert name in lerobot, name
    assert "--version" in result.output.split("Other options:")[1]


def test_compile_runs_once_on_cpu_with_the_known_answers(tmp_path):
    """``--compile`` end to end on CPU: torch.compile's default backend (Inductor, C++ on the CPU) compiles the
    policy step once, and the run gives the known-answer env's numbers. Tiny on purpose: one graph, 5 episodes."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    try:
        result = run(["--env", KA, "--policy", "fasteval.testing.policies:ParityPolicy", "-n", "5", "-b", "2",
                      "--device", "cpu", "--compile", "--no-report", "-o", str(tmp_path)])
        assert result.exit_code == 0, result.output
        graphs = counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()
    assert graphs >= 1  # compiled, not silently run eagerly
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert info["meta"]["policy_compile"] is True
    want = [expected_episode(i, action_fn=lambda obs: int(obs[2])) for i in range(5)]
    assert [(r["sum_reward"], r["length"], r["success"]) for r in info["per_episode"]] == \
        [(e["sum_reward"], e["length"], e["success"]) for e in want]


# -- resume with the original command line ----------------------------------------------------------

def test_resume_accepts_the_original_command_line_and_refuses_only_what_differs(tmp_path):
    out = tmp_path / "run"
    original = ["--env", KA, "--policy", "zero", "-n", "6", "-b", "2", "--seed", "4", "--env-kwarg", "nan_reward_seeds=[5]",
                "-o", str(out)]
    assert run(original).exit_code == 0
    (out / "eval_info.json").unlink()
    same = run([*original, "--resume", str(out)])
    assert same.exit_code == 0, same.output
    assert "6 episodes were already recorded" in same.output
    faster = run([*original, "-b", "3", "--resume", str(out)])  # how it runs may change
    assert faster.exit_code == 0, faster.output
    differ = CliRunner().invoke(main, [*original, "--seed", "5", "-n", "5", "--resume", str(out)])
    assert differ.exit_code == 2, differ.output
    assert "--seed: the run has 4, this command has 5" in differ.output
    assert "--n-episodes: the run has 6, this command has 5 (a resume may only extend a run" in differ.output
    assert "--env-kwarg" not in differ.output and "--policy" not in differ.output  # equal ones are not named
    lines = (out / "episodes.jsonl").read_text()
    extended = run([*original, "-n", "8", "--resume", str(out)])  # a larger -n extends the run (issue 31)
    assert extended.exit_code == 0, extended.output
    assert (out / "episodes.jsonl").read_text().startswith(lines)  # the 6 recorded episodes are kept, not rerun
    info = json.loads((out / "eval_info.json").read_text())
    assert [e["seed"] for e in info["per_episode"]] == list(range(4, 12)) and info["meta"]["status"] == "complete"
    assert json.loads((out / "manifest.json").read_text())["what"]["n_episodes"] == 8
    other_dir = CliRunner().invoke(main, ["-o", str(tmp_path / "elsewhere"), "--resume", str(out)])
    assert other_dir.exit_code == 2 and "--output-dir" in other_dir.output
    kwargs = CliRunner().invoke(main, ["--env-kwarg", "nan_reward_seeds=[1]", "--resume", str(out)])
    assert kwargs.exit_code == 2 and "--env-kwarg: the run has {'nan_reward_seeds': [5]}" in kwargs.output


class _CoinFlips:
    """Actions drawn from torch's global RNG; ``declares`` says so in ``run_meta`` (as LeRobot's policies do)."""

    def __init__(self, declares: bool):
        self.declares = declares

    def __call__(self, obs):
        return torch.randint(0, 2, (obs.shape[0],))

    def run_meta(self):
        return {"policy_rng": "global"} if self.declares else {}


def global_rng_policy():
    return _CoinFlips(True)


def undeclared_policy():
    return _CoinFlips(False)


@pytest.mark.parametrize("factory", ["global_rng_policy", "undeclared_policy"])
def test_a_resumed_run_of_a_policy_on_the_global_rng_says_its_later_draws_are_not_one_runs(tmp_path, factory):
    """A policy that declares draws from torch's global RNG: a resume seeds that RNG anew, so the record,
    the summary and the page say the episodes after it are not the draws of one uninterrupted run."""
    out = tmp_path / "run"
    first = ["--env", KA, "--policy", f"tests.test_cli:{factory}", "--trust-remote-code", "-n", "4", "-b", "2",
             "-o", str(out)]
    assert run(first).exit_code == 0
    info = json.loads((out / "eval_info.json").read_text())
    assert "resumed_global_rng" not in info["meta"]  # one segment: nothing to say
    extended = run([*first[:-4], "-n", "8", "--resume", str(out)])
    assert extended.exit_code == 0, extended.output
    info = json.loads((out / "eval_info.json").read_text())
    page = (out / "report.html").read_text()
    if factory == "global_rng_policy":
        assert info["meta"]["policy_rng"] == "global"
        assert "not the draws one uninterrupted run would have made" in info["meta"]["resumed_global_rng"]
        assert "noise" in extended.output and "which a resume seeds anew" in extended.output
        assert "noise after a resume" in page
    else:
        assert "resumed_global_rng" not in info["meta"] and "which a resume seeds anew" not in extended.output
        assert "noise after a resume" not in page
    again = run([*first[:-4], "-n", "8", "--resume", str(out)])  # nothing left to run: no new draws, same record
    assert again.exit_code == 0, again.output
    assert json.loads((out / "eval_info.json").read_text())["meta"].get("resumed_global_rng") == info["meta"].get(
        "resumed_global_rng")


@pytest.mark.parametrize("killed", ["the first segment", "the resumed segment"])
def test_the_global_rng_note_survives_a_killed_segment(tmp_path, killed):
    """A kill leaves a segment's records but no manifest entry for it (its status stays ``running``); the
    note must still follow from what the folder holds, at the resume that runs nothing more."""
    out = tmp_path / "run"
    args = ["--env", KA, "--policy", "tests.test_cli:global_rng_policy", "--trust-remote-code", "-b", "2"]

    def kill_the_last_segment():  # what a SIGKILL after the segment's last record leaves
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["segments"].pop()
        manifest["status"] = "running"
        (out / "manifest.json").write_text(json.dumps(manifest))

    assert run([*args, "-n", "4", "-o", str(out)]).exit_code == 0
    if killed == "the first segment":
        kill_the_last_segment()
    assert run([*args, "-n", "8", "--resume", str(out)]).exit_code == 0  # episodes 4..7 drawn after a resume
    if killed == "the resumed segment":
        kill_the_last_segment()
    last = run([*args, "-n", "8", "--resume", str(out)])  # nothing left to run
    assert last.exit_code == 0, last.output
    info = json.loads((out / "eval_info.json").read_text())
    assert len(info["per_episode"]) == 8 and "resumed_global_rng" in info["meta"], info["meta"]
    assert "which a resume seeds anew" in last.output


def test_resume_accepts_the_original_config_file(tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"env": KA, "n_episodes": 5, "seed": 2, "output_dir": str(out)}))
    assert run(["--config", str(config)]).exit_code == 0
    again = run(["--config", str(config), "--resume", str(out)])
    assert again.exit_code == 0, again.output
    config.write_text(json.dumps({"env": KA, "n_episodes": 5, "seed": 3, "output_dir": str(out)}))
    changed = CliRunner().invoke(main, ["--config", str(config), "--resume", str(out)])
    assert changed.exit_code == 2 and "seed (in" in changed.output and "the run has 2" in changed.output


# -- failed episodes in the terminal --------------------------------------------------------------

FAULTY = "fasteval.testing.faulty:make_faulty_env"


@pytest.mark.parametrize("seeds, shown, more", [([2], [2], 0), ([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5], 2)])
def test_failed_episodes_are_named_in_the_terminal(tmp_path, seeds, shown, more):
    args = ["--env", FAULTY, "--env-kwarg", "fault=raise", "--env-kwarg", f"fault_seeds={json.dumps(seeds)}",
            "--env-kwarg", "fault_step=1", "-n", "9", "-b", "3", "--retries", "0", "-o", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    if len(seeds) == 1:
        assert "1 episode failed for good" in result.output and "1 episodes" not in result.output
    else:
        assert f"{len(seeds)} episodes failed for good" in result.output
    named = [line for line in result.output.splitlines() if line.startswith("  episode ")]
    assert [line.split()[1] for line in named] == [str(i) for i in shown]
    for line, i in zip(named, shown):
        assert f"(seed {i}, step)" in line and "planted" in line
    assert (f"... and {more} more" in result.output) == bool(more)
    assert "errors.jsonl" in result.output


def make_faulty_task_env(task: str, **kwargs) -> "FaultyEnv":
    """A faulty known-answer env named by a ``task`` kwarg, so that a list of tasks is a suite."""
    from fasteval.testing.faulty import FaultyEnv

    return FaultyEnv(**kwargs)


def test_a_suite_ends_as_a_single_run_does_failed_episodes_and_how_to_resume(tmp_path):
    out = tmp_path / "suite"
    args = ["--env", "tests.test_cli:make_faulty_task_env", "--env-kwarg", 'task=["a", "b"]', "--env-kwarg", "fault=raise",
            "--env-kwarg", "fault_seeds=[1]", "--env-kwarg", "fault_step=1", "-n", "3", "-b", "3", "--retries", "0",
            "-o", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "1 episode failed for good" in result.output  # the failed-episode list, as a single run prints it
    named = [line for line in result.output.splitlines() if line.startswith("  episode ")]
    assert len(named) == 1 and "(seed 1, step)" in named[0] and "planted" in named[0]
    assert str(out / "tasks" / "*" / "errors.jsonl") in result.output
    assert "stopped after 2 of 6 episodes. Resume with:" in result.output  # the first task failed: the suite stopped
    assert f"the same command with --output-dir {out}" in result.output
    assert "1 of 2 tasks; status: failed" in result.output


def test_plural():
    from fasteval.render.words import plural

    assert [plural(n, "episode") for n in (0, 1, 2)] == ["0 episodes", "1 episode", "2 episodes"]


# -- --help stays light ---------------------------------------------------------------------------

def test_help_imports_neither_torch_nor_the_engine():
    import subprocess
    import sys

    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from fasteval.doors.cli import main\n"
            "result = CliRunner().invoke(main, ['--help'])\n"
            "assert result.exit_code == 0, result.output\n"
            "assert 'sweep' in result.output and 'bench' in result.output\n"
            "heavy = sorted(m for m in ('torch', 'fasteval.run.engine', 'fasteval.core.engine', 'fasteval.run.durable',\n"
            "                           'fasteval.doors.bench.cli', 'fasteval.doors.sweep.cli') if m in sys.modules)\n"
            "print('HEAVY', heavy)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout


def test_subcommand_help_still_works():
    for name in ("sweep", "report", "bench"):
        result = run([name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage" in result.output


# -- sweeps: what the store holds after a resume ----------------------------------------------------

def test_a_resumed_sweep_says_how_many_episodes_the_store_holds(tmp_path):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"name": "t", "episodes": 3, "seeds": [0], "policies": [{"name": "zero", "ref": "zero"}],
                                "envs": [{"name": "a", "id": KA}, {"name": "b", "id": KA, "kwargs": {"nan_reward_seeds": [1]}}],
                                "options": {"batch_size": 2, "device": "cpu"}}))
    out = tmp_path / "sweep"
    first = run(["sweep", str(spec), "-o", str(out), "-w", "1", "--no-report"])
    assert first.exit_code == 0, first.output
    assert "2 jobs ran" in first.output and "6 episodes added, 6 episodes now stored" in first.output
    again = run(["sweep", str(spec), "-o", str(out), "-w", "1", "--no-report"])
    assert again.exit_code == 0, again.output
    assert "0 jobs ran (0 finished, 0 failed); 2 were already complete and skipped" in again.output
    assert "0 episodes added, 6 episodes now stored" in again.output


def test_summary_says_no_success_signal_for_an_env_without_one(tmp_path):
    silent = run(["--env", "CartPole-v1", "--policy", "zero", "-n", "4", "-b", "2", "-o", str(tmp_path / "a")])
    assert silent.exit_code == 0, silent.output
    assert "no success signal" in silent.output
    assert json.loads((tmp_path / "a" / "eval_info.json").read_text())["overall"]["has_success_signal"] is False
    loud = run(["--env", KA, "--policy", "zero", "-n", "4", "-b", "2", "-o", str(tmp_path / "b")])
    assert loud.exit_code == 0 and "no success signal" not in loud.output and "95% CI" in loud.output


# -- trust (issue 20, docs/security.md) -----------------------------------------------------------

EVIL = '''
from pathlib import Path
Path("PWNED").write_text("the file ran")
from fasteval.testing.envs import KnownAnswerEnv
def make(**kwargs) -> KnownAnswerEnv:
    return KnownAnswerEnv(**kwargs)
'''


def test_an_env_from_a_file_path_needs_trust_remote_code_as_a_policy_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.py").write_text(EVIL)
    refused = CliRunner().invoke(main, ["--env", "./evil.py:make", "-n", "2", "-o", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "--trust-remote-code" in refused.output, refused.output
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "a").exists()
    trusted = run(["--env", "./evil.py:make", "-n", "2", "-o", str(tmp_path / "b"), "--trust-remote-code"])
    assert trusted.exit_code == 0, trusted.output
    assert (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("config, needle", [
    ({"env": "os:system", "env_kwargs": {"command": "touch PWNED"}}, "names a Python callable"),
    ({"env": KA, "policy": "fasteval.testing.policies:ParityPolicy"}, "names a Python callable"),
    ({"env": "./evil.py:make"}, "loads Python code from a file"),
    ({"env": KA, "trust_remote_code": True}, "can never grant trust"),
    ({"env": "./evil.py:make", "trust_remote_code": True}, "can never grant trust"),
])
def test_a_config_file_is_data_code_it_names_needs_the_flag(tmp_path, monkeypatch, config, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.py").write_text(EVIL)
    (tmp_path / "c.json").write_text(json.dumps({"n_episodes": 2, **config}))
    result = CliRunner().invoke(main, ["--config", "c.json", "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and needle in result.output and "--trust-remote-code" in result.output, result.output
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()


def test_the_command_line_flag_lets_a_config_name_code_and_a_saved_config_grants_nothing(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"env": KA, "n_episodes": 2,
                                                 "policy": "fasteval.testing.policies:ParityPolicy"}))
    result = run(["--config", str(tmp_path / "c.json"), "-o", str(tmp_path / "out"), "--trust-remote-code"])
    assert result.exit_code == 0, result.output
    saved = tmp_path / "out" / "config.json"
    assert json.loads(saved.read_text())["trust_remote_code"] is True
    refused = CliRunner().invoke(main, ["--config", str(saved), "-o", str(tmp_path / "again")])
    assert refused.exit_code == 2 and "can never grant trust" in refused.output
    assert run(["--config", str(saved), "-o", str(tmp_path / "again"), "--trust-remote-code"]).exit_code == 0


@pytest.mark.parametrize("args, needle", [
    (["--seed", str(2**64 - 1)], "at most 2**63 - 1"),  # was an OverflowError and a folder stuck `running`
    (["--seed", str(2**63 - 1), "-n", "2"], "use seed <= 9223372036854775806"),
    (["--vectorization", "async", "--step-timeout", "inf"], "finite number of seconds"),  # was an OverflowError
    (["--vectorization", "async", "--step-timeout", "1e12"], "<= 1000000"),
    (["-n", str(10**12)], "TiB of memory"),  # tried to allocate 7.28 TiB
])
def test_values_that_used_to_crash_mid_run_exit_2_before_it(tmp_path, args, needle):
    result = CliRunner().invoke(main, ["--env", KA, *args, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and needle in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_the_largest_seed_runs():
    from fasteval import evaluate

    result = evaluate(env=KA, n_episodes=2, seed=2**63 - 2)
    assert [r["seed"] for r in result.per_episode] == [2**63 - 2, 2**63 - 1]
    assert [r["sum_reward"] for r in result.per_episode] == [expected_episode(s)["sum_reward"] for s in (2**63 - 2, 2**63 - 1)]


def test_an_env_callable_on_the_command_line_must_be_an_env_constructor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shell = CliRunner().invoke(main, ["--env", "os:system", "--env-kwarg", "command=touch PWNED", "-o", str(tmp_path / "a")])
    assert shell.exit_code == 2 and "not an env constructor" in shell.output and "--trust-remote-code" in shell.output
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "a").exists()
    plain = CliRunner().invoke(main, ["--env", "tests.helpers:never_succeeding_env", "-n", "2", "-o", str(tmp_path / "b")])
    assert plain.exit_code == 2 and "not an env constructor" in plain.output, plain.output
    trusted = run(["--env", "tests.helpers:never_succeeding_env", "-n", "2", "-o", str(tmp_path / "c"), "--trust-remote-code"])
    assert trusted.exit_code == 0, trusted.output


def _as_if_killed(out):
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    (out / "eval_info.json").unlink()


def test_a_manifest_cannot_grant_trust_on_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.py").write_text(EVIL)
    out = tmp_path / "run"
    assert run(["--env", "./evil.py:make", "-n", "3", "-o", str(out), "--trust-remote-code"]).exit_code == 0
    assert json.loads((out / "manifest.json").read_text())["how"]["trust_remote_code"] is True
    _as_if_killed(out)
    (tmp_path / "PWNED").unlink()
    refused = CliRunner().invoke(main, ["--resume", str(out)])
    assert refused.exit_code == 2 and "manifest" in refused.output and "--trust-remote-code" in refused.output
    assert not (tmp_path / "PWNED").exists()
    assert run(["--resume", str(out), "--trust-remote-code"]).exit_code == 0


def test_a_resume_keeps_the_runs_fault_handling(tmp_path):
    plan = json.dumps({"2": [["raise", 0]]})
    out, state = tmp_path / "run", tmp_path / "state"
    args = ["--env", "fasteval.testing.fault_plan:make_fault_plan_env", "--env-kwarg", f"plan={plan}",
            "--env-kwarg", f"state_dir={state}", "-n", "4", "--retries", "0", "-o", str(out)]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 1 and "1 episode failed for good" in first.output, first.output
    _as_if_killed(out)
    for marker in state.iterdir():  # a new process: the env's faults start again
        marker.unlink()
    again = CliRunner().invoke(main, ["--resume", str(out), "--trust-remote-code"])
    # --retries 0 from the manifest (the command line's default of 1 would retry seed 2 and finish it)
    assert again.exit_code == 1 and "1 episode failed for good" in again.output, again.output
    assert json.loads((out / "manifest.json").read_text())["how"]["retries"] == 0


def silent_known_answer(**kwargs) -> "FaultyEnv":
    """KnownAnswerEnv (renderable) whose info never carries is_success: no success signal."""

    class Silent(FaultyEnv):
        def step(self, action):
            obs, reward, terminated, truncated, _info = super().step(action)
            return obs, reward, terminated, truncated, {}

    return Silent(**kwargs)


def test_without_a_success_signal_pc_success_is_null_absent_from_the_sinks_and_videos_say_no_outcome(tmp_path):
    # issue 20: pc_success read 0.0 (TensorBoard and W&B logged a false 0%), videos were named _failure
    result = run(["--env", "tests.test_cli:silent_known_answer", "--env-kwarg", "render_mode=rgb_array", "-n", "3",
                  "--videos", "2", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "no success signal" in result.output
    info = json.loads((tmp_path / "out" / "eval_info.json").read_text())
    overall = info["overall"]
    assert overall["has_success_signal"] is False
    assert overall["pc_success"] is None and overall["pc_success_ci95"] is None and overall["n_success"] is None
    assert info["per_task"][0]["aggregated"]["pc_success"] is None
    videos = sorted(p.name for p in (tmp_path / "out" / "videos").rglob("*.mp4"))
    assert videos == ["ep000000_seed0.mp4", "ep000001_seed1.mp4"]
    from fasteval import evaluate
    from fasteval.run.sinks import metrics

    silent = evaluate(env="tests.test_cli:silent_known_answer", n_episodes=3)
    assert not any("success" in key for key in silent.to_dict())
    assert not any("success" in key for key in metrics(silent))


def test_videos_of_an_env_kwarg_task_go_into_the_task_folder(tmp_path):
    result = run(["--env", "tests.test_cli:make_faulty_task_env", "--env-kwarg", "task=alpha", "--env-kwarg",
                  "render_mode=rgb_array", "-n", "2", "--videos", "1", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert [p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.mp4")] == [
        "videos/alpha/ep000000_seed0_success.mp4"]


# -- issue 32: inputs that gave a traceback, a crash or the wrong exit code ---------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--policy", "ws://[::1"], "Invalid IPv6 URL"),  # was a ValueError traceback, exit 1
    (["--policy", "ws://127.0.0.1:99999"], "with a port from 1 to 65535"),  # was a ValueError traceback
    (["--policy", "ws://127.0.0.1:port"], "with a port from 1 to 65535"),
    (["-n", "1", "-b", "7", "--pipeline", "--vectorization", "async"], "batch size 7 capped at the 1 episode"),
])
def test_bad_input_gives_one_line_and_exit_2(tmp_path, args, needle):
    result = CliRunner().invoke(main, ["--env", KA, *args, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and needle in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "out").exists()


def test_device_cuda_n_is_accepted_as_evalspec_accepts_it(tmp_path):
    """``--device cuda:0`` reaches the engine (here: no CUDA, so its own refusal), not click's "not one of"."""
    import torch

    result = CliRunner().invoke(main, ["--env", KA, "--device", "cuda:0", "-n", "1", "-o", str(tmp_path / "out")])
    if torch.cuda.is_available():
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2 and "CUDA is not available" in result.output, result.output
    assert "is not one of" not in result.output
    wrong = CliRunner().invoke(main, ["--env", KA, "--device", "gpu0", "-n", "1", "-o", str(tmp_path / "out")])
    assert wrong.exit_code == 2 and "expected cpu, cuda, cuda:N" in wrong.output, wrong.output


def test_trust_remote_code_help_names_envs_too():
    text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    start = text.index("--trust-remote-code")
    assert "envs" in text[start:start + 300] and "namespace" in text[start:start + 300]


def test_bench_has_no_video_options():
    """The bench times an evaluation and writes no videos: none of the three video options is offered."""
    from fasteval.doors.bench.cli import bench

    names = {opt for param in bench.params for opt in param.opts}
    assert not names & {"--videos", "--max-episodes-rendered", "--video-select", "--video-layout"}
    assert {"--policy", "--env", "--device"} <= names
