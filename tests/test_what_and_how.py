"""What is evaluated, and how it runs (issue 29): the spec's two halves.

* every *how* field, changed one at a time, leaves every episode's numbers as they were: a field that
  changes the numbers put in ``How`` fails here (the tables below must name every field of each half);
* a *what* field changes the numbers (where the known-answer setting can show it), and a resume refuses
  a different *what* while it accepts any *how*, with no hand-kept list.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
import pytest

from fasteval.testing import ParityPolicy
from fasteval.types.errors import UserInputError
from fasteval.types.spec import HOW_FIELDS, SPEC_FIELDS, WHAT_FIELDS, EvalSpec, How, What

KA = "fasteval.testing.envs:make_known_answer_env"
BASE = dict(env=KA, env_kwargs={"nan_reward_seeds": [5]}, n_episodes=12, seed=3, batch_size=4, device="cpu")
"""A known-answer run whose numbers depend on the policy's actions (ParityPolicy reads the observation)."""


def how_changes(tmp_path) -> dict[str, dict]:
    """For every *how* field, a run that changes it (with the other *how* fields it needs, nothing else)."""
    videos = str(tmp_path / "videos")
    return {
        "batch_size": {"batch_size": 7},
        "vectorization": {"vectorization": "async"},
        "workers": {"vectorization": "async", "workers": 1},
        "device": {"device": "auto"},
        "reset_mode": {"reset_mode": "wave"},
        "pipeline": {"vectorization": "async", "pipeline": True},
        "cuda_graph": {"cuda_graph": True},  # without CUDA: a warned pass-through
        "compile": {"compile": True},
        "stack_weights": {"stack_weights": True},  # one policy: nothing to stack (tests/test_many_policies.py stacks)
        "cpu_threads": {"cpu_threads": 2},
        "trust_remote_code": {"trust_remote_code": True},
        "retries": {"retries": 0},
        "on_nan_action": {"on_nan_action": "skip-episode"},
        "step_timeout": {"step_timeout": 60.0},
        "policy_timeout_s": {"policy_timeout_s": 60.0},
        "stop_grace_s": {"stop_grace_s": 1.0},
        "max_episodes_rendered": {"max_episodes_rendered": 2, "videos_dir": videos},
        "video_select": {"max_episodes_rendered": 2, "video_select": "failures", "videos_dir": videos + "-f"},
        "videos_dir": {"max_episodes_rendered": 1, "videos_dir": videos + "-d"},
        "video_layout": {"max_episodes_rendered": 1, "video_layout": "lerobot", "videos_dir": videos + "-l"},
        "return_episode_data": {"return_episode_data": True},
    }


WHAT_CHANGES = {
    "env": {"env": "fasteval.testing.envs:make_known_answer_float64_env"},
    "policy": {"policy": "zero"},
    "policy_names": {"policy": ("random", "zero"), "policy_names": ("a", "b")},
    "env_kwargs": {"env_kwargs": {}},
    "n_episodes": {"n_episodes": 5},
    "seed": {"seed": 4},
    "max_steps": {"max_steps": 3},
    "observation_format": {"observation_format": "lerobot"},
    "rename": {"rename": {"observation": "observation.state"}},
    "obs_dtype": {"obs_dtype": "float64"},
    "policy_block": {"policy_block": 0},
    "noise": {"noise": "global"},
    "policy_overrides": {"policy_overrides": {"n_action_steps": "3"}},
    "exploration": {"exploration": "random"},
    "amp": {"amp": "bf16"},
    "stop_when": {"stop_when": "ci<=0.4"},
    "confidence": {"confidence": 0.9},
    "return_bounds": {"return_bounds": (-80.0, 10.0)},
    "design": {"stop_when": "above=0.8", "design": "truncated"},
    "rank_by": {"rank_by": "return"},
}
"""For every *what* field, another value (a resume must refuse each)."""

CHANGES_NUMBERS = ("policy", "env_kwargs", "n_episodes", "seed", "max_steps", "stop_when")
"""The *what* fields whose change this known-answer setting shows in the numbers (the others change what a
learned policy sees or computes in ways a parity rule cannot show: dtypes, keys, noise, exploration, precision)."""


def episodes(result) -> dict[str, np.ndarray]:
    """Every per-episode column, NaN-safe to compare."""
    table = result.per_episode
    return {name: np.asarray(table.column(name)) for name in table.fields if name != "run_id"}


def same_episodes(a, b) -> bool:
    ea, eb = episodes(a), episodes(b)
    return ea.keys() == eb.keys() and all(
        np.array_equal(ea[k], eb[k], equal_nan=ea[k].dtype.kind == "f") for k in ea)


def run(**changes):
    from fasteval import evaluate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # --cuda-graph without CUDA says it runs eagerly
        return evaluate(EvalSpec(**{**BASE, "policy": ParityPolicy(), **changes}))


def test_the_tables_name_every_field_of_each_half_and_each_field_is_in_one_half(tmp_path):
    assert set(how_changes(tmp_path)) == set(HOW_FIELDS)
    assert set(WHAT_CHANGES) == set(WHAT_FIELDS)
    assert not set(WHAT_FIELDS) & set(HOW_FIELDS) and SPEC_FIELDS == (*WHAT_FIELDS, *HOW_FIELDS)
    assert [f.name for f in dataclasses.fields(EvalSpec)] == list(SPEC_FIELDS)  # the flat spec is the two halves
    for name, change in how_changes(tmp_path).items():
        assert set(change) <= set(HOW_FIELDS), f"{name}: a how change may only need other how fields"
    for f in [*dataclasses.fields(What), *dataclasses.fields(How)]:  # each docstring says its half
        half = "What" if f.name in WHAT_FIELDS else "How"
        doc = _field_doc(What if half == "What" else How, f.name)
        assert doc.startswith(f"{half}:") or doc.startswith(f"{half},"), f"{f.name}: {doc[:60]!r}"


def _field_doc(cls, name: str) -> str:
    """The docstring under a dataclass field (the string literal after its line)."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(cls)).body[0].body
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return after.value.value if isinstance(after, ast.Expr) else ""
    return ""


@pytest.fixture(scope="module")
def reference():
    return run()


@pytest.mark.parametrize("field", HOW_FIELDS)
def test_changing_a_how_field_changes_no_number(field, reference, tmp_path, monkeypatch):
    """Run the known-answer env with one *how* field changed: every episode's numbers stay the same."""
    change = how_changes(tmp_path)[field]
    if field == "compile":  # torch.compile's C++ backend takes minutes here; tracing (what could change a
        import torch        # number: the graph it runs) is the same with the eager backend
        monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    changed = run(**change)
    assert len(changed.per_episode) == len(reference.per_episode) == BASE["n_episodes"]
    assert same_episodes(changed, reference), f"{field}={change[field]!r} changed the numbers: it is not *how*"
    if "max_episodes_rendered" in change:  # the change did something: videos were written
        assert len(changed.video_paths) == change["max_episodes_rendered"]
    if field == "return_episode_data":
        assert changed.episode_data is not None and len(changed.episode_data) == int(changed.column("length").sum())


@pytest.mark.parametrize("field", CHANGES_NUMBERS)
def test_changing_a_what_field_changes_the_numbers(field, reference):
    """The same setting does show a *what* field's change (so the test above can fail)."""
    assert not same_episodes(run(**WHAT_CHANGES[field]), reference)


def test_amp_changes_a_learned_policys_numbers():
    """AMP is *what*: at bf16 a float policy's outputs differ from its float32 ones by more than rounding."""
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    x = torch.rand(256, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = net(x).float()
    assert (low - net(x)).abs().max() > 1e-4  # far above float32's rounding of the same sums (~1e-7)


# -- resume: what must match, how may change ----------------------------------------------------------
def manifest_of(spec: EvalSpec) -> dict:
    from fasteval.run.record import manifest_document

    return manifest_document(spec, {"run_id": "r", "policy_digest": "d", "max_steps": 13}, "interrupted", [])


def check(manifest: dict, spec: EvalSpec) -> None:
    from fasteval.run.rundir import check_resumable

    check_resumable(manifest, spec, {"policy_digest": "d", "max_steps": 13}, folder="run")


@pytest.mark.parametrize("field", WHAT_FIELDS)
def test_a_resume_refuses_another_what(field):
    spec = EvalSpec(**BASE, policy="random")
    manifest = manifest_of(spec)
    other = spec.replace(**WHAT_CHANGES[field] if field != "policy" else {"policy": "zero"})
    with pytest.raises(UserInputError, match=f"{field}: the original run had"):
        check(manifest, other)


def test_a_resume_accepts_any_how_and_a_larger_n(tmp_path):
    spec = EvalSpec(**BASE, policy="random")
    manifest = manifest_of(spec)
    check(manifest, spec)
    for field, change in how_changes(tmp_path).items():
        check(manifest, spec.replace(**change))
    check(manifest, spec.replace(n_episodes=50))  # a larger n extends the run (issue 31)
    check(manifest, spec.replace(how=How(batch_size=1, vectorization="async", retries=5)))


def test_an_older_manifest_with_a_flat_spec_still_resumes():
    """Run folders of the fasteval before the split hold one flat ``spec``; their *what* is read from it."""
    spec = EvalSpec(**BASE, policy="random")
    old = {"spec": spec.to_dict(), "run_id": "r", "policy_digest": "d", "max_steps": 13, "seed": 3}
    check(old, spec.replace(batch_size=1))
    with pytest.raises(UserInputError, match="seed: the original run had 3"):
        check(old, spec.replace(seed=9))
    for field in ("noise", "obs_dtype"):  # a field the old manifest lacks counts as its default
        old_spec = {k: v for k, v in spec.to_dict().items() if k != field}
        check({**old, "spec": old_spec}, spec)


def test_the_halves_and_the_flat_spec_are_one_spec():
    spec = EvalSpec(**BASE, policy="zero")
    assert isinstance(spec.what, What) and isinstance(spec.how, How)
    assert EvalSpec.of(spec.what, spec.how) == spec
    assert EvalSpec.from_dict({"what": spec.what.to_dict(), "how": spec.how.to_dict()}) == spec
    assert EvalSpec.from_dict(spec.to_dict()) == spec
    faster = spec.replace(batch_size=1, vectorization="async")
    assert faster.what == spec.what and faster.how != spec.how and faster.batch_size == 1
    assert spec.replace(how=How()).how == How() and spec.replace(how=How()).what == spec.what
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.batch_size = 3  # type: ignore[misc]


@pytest.mark.parametrize("changes, expected", [
    ({"cpu_threads": 100_000}, "cpu_threads: expected None or an integer from 1 to 1024"),
    ({"cpu_threads": 0}, "cpu_threads: expected None or an integer from 1 to 1024"),
    ({"max_steps": 10**22}, "max_steps: expected None or an integer from 1 to 2\\*\\*63 - 1"),
    ({"stop_grace_s": float("inf")}, "stop_grace_s: expected a finite number"),
])
def test_values_past_what_the_machine_can_do_are_refused_in_the_spec(changes, expected):
    with pytest.raises(UserInputError, match=expected):
        EvalSpec(env=KA, **changes)
