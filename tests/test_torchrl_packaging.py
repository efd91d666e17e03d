"""``fasteval[torchrl]`` pins a torchrl and the tensordict it was built against; CI installs it (the ``test`` extra
includes ``fasteval[torchrl,sb3]``), so these checks run against what the extra actually installed."""

from __future__ import annotations

import importlib.metadata as metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
BASE = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def pins(extra: str) -> dict[str, Requirement]:
    return {Requirement(r).name: Requirement(r) for r in EXTRAS[extra] if not r.startswith("fasteval")}


def test_the_torchrl_extra_pins_torchrl_and_its_tensordict():
    torchrl = pins("torchrl")
    assert set(torchrl) == {"torchrl", "tensordict"}
    assert torchrl["torchrl"].specifier and torchrl["tensordict"].specifier  # both bounded, not bare names
    assert not torchrl["torchrl"].specifier.contains("0.15.0") and not torchrl["tensordict"].specifier.contains("0.15.0")


def test_ci_installs_the_extras_through_the_test_extra():
    assert any(r.replace(" ", "") == "fasteval[torchrl,sb3]" for r in EXTRAS["test"])
    assert "./scripts/install.sh test,robot" in (REPO / ".ci" / "run").read_text()


def test_installed_versions_fit_the_extra_and_torchrls_own_pin():
    pytest.importorskip("torchrl")
    torchrl, tensordict = Version(metadata.version("torchrl")), Version(metadata.version("tensordict"))
    extra = pins("torchrl")
    assert extra["torchrl"].specifier.contains(torchrl)
    assert extra["tensordict"].specifier.contains(tensordict)
    own = [Requirement(r) for r in metadata.requires("torchrl") or [] if Requirement(r).name == "tensordict"
           and Requirement(r).marker is None]
    assert own, "torchrl declares no tensordict requirement"
    assert all(r.specifier.contains(tensordict) for r in own), (own, tensordict)
    base = [Requirement(r) for r in BASE if Requirement(r).name == "tensordict"]
    assert all(r.specifier.contains(tensordict) for r in base)


def test_every_version_the_extra_allows_is_one_torchrl_accepts():
    """The extra's tensordict range sits inside what the pinned torchrl series asks for (0.14.x: >=0.14.3,<0.15)."""
    pytest.importorskip("torchrl")
    own = next(Requirement(r) for r in metadata.requires("torchrl") if Requirement(r).name == "tensordict")
    extra = pins("torchrl")["tensordict"]
    for candidate in ("0.14.3", "0.14.4", "0.14.9"):
        if extra.specifier.contains(candidate):
            assert own.specifier.contains(candidate), (candidate, own)
    for outside in ("0.14.2", "0.15.0", "0.13.0"):
        assert not extra.specifier.contains(outside)


def test_sb3_extra():
    assert "stable-baselines3" in pins("sb3")
