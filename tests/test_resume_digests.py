"""Record digests (issue 42): ``--resume`` dropped nothing it should have: a garbage, NUL-byte or repeated line in
``episodes.jsonl``, and an edited number, were used silently, and an edited manifest mixed two configurations.
Each record now carries a digest of the run's what and of itself; a resume drops what does not match, refuses an
edited manifest, says so, and still resumes an older fasteval's folder (records without digests, said)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.rundir import what_digest
from fasteval.testing import KNOWN_ANSWER_ID

N = 8


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def per_episode(folder) -> list[tuple]:
    doc = json.loads((folder / "eval_info.json").read_text())
    return [(r["episode_ix"], r["seed"], r["sum_reward"], r["length"]) for r in doc["per_episode"]]


@pytest.fixture
def finished(tmp_path):
    out = tmp_path / "run"
    result = run("--env", KNOWN_ANSWER_ID, "-n", N, "-b", 3, "--seed", 5, "-o", out)
    assert result.exit_code == 0, result.output
    return out, per_episode(out)


def lines(folder) -> list[bytes]:
    return (folder / "episodes.jsonl").read_bytes().splitlines(keepends=True)


def test_every_record_carries_a_digest_and_the_manifest_the_what_digest(finished):
    out, _ = finished
    records = [json.loads(line) for line in lines(out)]
    assert len(records) == N and all(len(r["digest"]) == 16 for r in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["what_digest"] == what_digest(manifest["what"], manifest)


def test_resume_drops_an_edited_garbage_nul_and_repeated_line_and_says_so(finished):
    out, reference = finished
    text = lines(out)
    edited = json.loads(text[1])
    edited["sum_reward"] += 100.0  # an edited number, digest kept
    text[1] = (json.dumps(edited, separators=(",", ":")) + "\n").encode()
    edited_ix = edited["episode_ix"]
    text.insert(3, b"this is not json\n")
    text.insert(4, b'{"episode_ix": 1\x00\x00}\n')
    text.append(text[0])  # a repeated record
    (out / "episodes.jsonl").write_bytes(b"".join(text))
    (out / "manifest.json").write_text((out / "manifest.json").read_text().replace('"complete"', '"running"'))
    result = run("--resume", out)
    assert result.exit_code == 0, result.output
    assert "dropped 1 record(s) whose digest does not match their content (line 2" in result.output
    assert "dropped 2 line(s) that are not records (line 4, 5)" in result.output
    assert "dropped 1 repeated record(s)" in result.output
    assert per_episode(out) == reference  # the edited episode ran again: its true number
    rerun = [json.loads(line) for line in lines(out)[-1:]]
    assert rerun[0]["episode_ix"] == edited_ix


def test_an_edited_manifest_is_refused(finished):
    out, _ = finished
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["what"]["env_kwargs"] = {"nan_reward_seeds": [6]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run("--resume", out, "-n", N + 2)
    assert result.exit_code == 2 and "manifest.json's what" in result.output and "edited" in result.output
    manifest["what_digest"] = what_digest(manifest["what"], manifest)  # the digest edited too: the records say no
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run("--resume", out, "-n", N + 2)
    assert result.exit_code == 2 and f"none of the {N} digested records" in result.output, result.output


def test_an_older_folder_without_digests_still_resumes_and_says_so(finished):
    out, reference = finished
    records = [json.loads(line) for line in lines(out)]
    for record in records:
        del record["digest"]
    kept = records[: N // 2]
    (out / "episodes.jsonl").write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["what_digest"]
    manifest["status"] = "running"
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run("--resume", out)
    assert result.exit_code == 0, result.output
    assert f"{N // 2} record(s) carry no digest (written by an older fasteval): used without a check" in result.output
    assert per_episode(out) == reference
    assert "what_digest" in json.loads((out / "manifest.json").read_text())
