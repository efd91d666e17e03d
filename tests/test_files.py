"""fasteval.types.files: the one safe file name and the one atomic writer every file of a run goes through."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, strategies as st

from fasteval.types.files import atomic_file, safe_filename, write_text_atomic


@pytest.mark.parametrize("text, name", [
    ("gym_pusht/PushT-v0", "gym_pusht_PushT-v0"),
    ("libero spatial", "libero_spatial"),
    ("../etc/passwd", "etc_passwd"),
    ("..", "_"),
    ("", "_"),
    (".hidden", "hidden"),
    ("fasteval.testing.envs:make_known_answer_env", "fasteval.testing.envs_make_known_answer_env"),
    (7, "7"),
])
def test_safe_filename(text, name):
    assert safe_filename(text) == name


@given(st.text())
def test_a_safe_filename_is_one_plain_visible_name(text):
    name = safe_filename(text)
    assert name and "/" not in name and os.sep not in name and "\x00" not in name
    assert name not in (".", "..") and not name.startswith(".")
    assert all(c.isalnum() or c in "-_." for c in name)


def test_atomic_file_replaces_whole_or_not_at_all(tmp_path):
    path = tmp_path / "sub" / "report.md"
    write_text_atomic(path, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as f:
            f.write("half of the new")
            raise RuntimeError("crash while writing")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.md"]  # no temp file left behind
    with atomic_file(path, "wb") as f:
        f.write(b"new\n")
    assert path.read_bytes() == b"new\n"


def test_atomic_files_get_the_usual_mode_not_mkstemps_private_one(tmp_path):
    umask = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "page.html", "<p>é</p>")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text(encoding="utf-8") == "<p>é</p>"
