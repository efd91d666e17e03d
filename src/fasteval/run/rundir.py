"""The output directory of one CLI run: durable, crash-safe, resumable.

Layout:
  manifest.json    written before the first record: the spec's two halves (``what``: what is evaluated,
                   which a resume must keep; ``how``: how it runs, which a resume may change), the
                   run's facts (env, policy, seed, n_episodes, the resolved max_steps, the policy digest,
                   the fasteval version), the provenance (command line, package versions, git commit,
                   machine, date: :mod:`fasteval.run.provenance`), its segments and a ``status``
                   (running / complete / interrupted / failed; :mod:`fasteval.run.record` decides it)
  episodes.jsonl   one JSON record per finished episode, appended in groups (see
                   :class:`fasteval.run.durable.GroupCommitLog`: at most 50 ms or 256 episodes late)
  errors.jsonl     one JSON record per env/policy fault (retried ones included)
  eval_info.json   the final results (classic layout), written atomically at the end
  config.json      the resolved config (written by the CLI; loadable with --config)
  report.html      the run's page (written by the CLI unless --no-report; :mod:`fasteval.render.html`)
  .fasteval.lock   the folder's lock (:mod:`fasteval.run.folder_lock`): one process at a time

Every record carries the ``run_id`` of its manifest, so a resume can tell this run's records from
another's. The record files are appended by :class:`~fasteval.run.record_file.RecordFile`: never
through a symbolic link, whole lines only (a failed write is cut back, and the error names the
file). A kill leaves at worst one torn last line in a ``.jsonl`` file: :meth:`RunDirectory.records`
ignores it, and a resume cuts it off before appending (:meth:`RunDirectory.cut_torn_tails`).
``manifest.json`` and ``eval_info.json`` are replaced atomically (temp file + rename), so they are
never half-written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from fasteval.run.folder_lock import LOCK_NAME
from fasteval.run.record_file import DiskFullError, RecordFile, cut_torn_tail, write_error  # noqa: F401 (re-exported)
from fasteval.types.errors import FastevalError, UserInputError
from fasteval.types.episode_table import EpisodeTable
from fasteval.types.json_writer import record_texts
from fasteval.types.results import write_json_atomic


@runtime_checkable
class HasWeights(Protocol):
    """A policy with ``state_dict()`` (an ``nn.Module``, or any object of that protocol): its weights are hashed."""

    def state_dict(self) -> Any: ...


MANIFEST, EPISODES, ERRORS, EVAL_INFO = "manifest.json", "episodes.jsonl", "errors.jsonl", "eval_info.json"

_encode = json.JSONEncoder(check_circular=False, separators=(",", ":")).encode


def format_records(records: Sequence[dict[str, Any]]) -> str:
    """``records`` -> their JSON lines, one string ending in a newline (``""`` for none).

    Compact separators; NaN is written as ``NaN`` (Python's json reads it back). The whole batch
    is encoded with one call of the C encoder and cut into lines at the record boundaries
    (``,{"<first key>":``, a sequence that cannot occur inside an encoded string, whose quotes
    are escaped); if the records do not all start with the same key, or a nested value repeats
    the boundary, each record is encoded on its own instead. Either way the lines are the same.
    """
    n = len(records)
    if n == 0:
        return ""
    first = next(iter(records[0]), None)
    if first is not None and n > 1:
        head = "{" + _encode(first) + ":"
        body = _encode(list(records))[1:-1]
        boundary = "," + head
        if body.count(boundary) == n - 1 and all(next(iter(r), None) == first for r in records):
            return body.replace(boundary, "\n" + head) + "\n"
    return "\n".join([_encode(record) for record in records]) + "\n"


def table_lines(table: EpisodeTable) -> str:
    """The rows of ``table`` as JSON lines: exactly ``format_records(table.to_list())``, built column by
    column (:func:`~fasteval.types.json_writer.record_texts`) without the per-row dicts."""
    return lines_of(record_texts(table, compact=True, encode=_encode))


def episode_lines(rows: Any, items: Sequence[int], run_id: str | None) -> str:
    """The lines of ``episodes.jsonl`` for the ledger rows ``items`` of ``rows`` (an
    :class:`~fasteval.run.record.EpisodeRows`), each record carrying ``run_id``: exactly
    ``format_records(rows.table(items, run_id=run_id).to_list())``."""
    return lines_of(rows.texts(items, run_id=run_id, compact=True, encode=_encode))


DIGEST_KEY = "digest"
"""Each ``episodes.jsonl`` record's last key: 16 hex digits of sha256 over the run's what digest
(:func:`what_digest`) and the record's own line without it (:func:`digested_lines`). A resume drops a record whose
digest does not match (an edited number) and says so."""
_DIGEST_HEAD = ',"digest":"'
_DIGEST_TAIL = len(_DIGEST_HEAD) + 16 + 2  # ,"digest":"<16 hex>"}
WHAT_DIGEST_SKIPS = ("n_episodes", "policy")
"""*What* fields a resume may change (a larger ``n_episodes``; the policy's path, whose weights ``policy_digest``
covers): left out of :func:`what_digest`."""


def what_digest(what: dict[str, Any], identity: dict[str, Any]) -> str:
    """16 hex digits of sha256 over the run's *what* (``spec.what.to_dict()``, less :data:`WHAT_DIGEST_SKIPS`), its
    weights' digest and its resolved step cap: what every record of the run is digested with."""
    doc = {"what": {k: v for k, v in what.items() if k not in WHAT_DIGEST_SKIPS},
           **{k: identity.get(k) for k in RESUME_IDENTITY}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def line_digest(what: str, line: str) -> str:
    """The digest of one record's line (without its digest) in the run whose what digest is ``what``."""
    return hashlib.sha256(f"{what}\n{line}".encode()).hexdigest()[:16]


def digested_lines(text: str, what: str) -> str:
    """``text`` (records' JSON lines, as :func:`episode_lines` writes them) with each record's digest as its last key.
    The line's other bytes are unchanged: the columnar writer's output, then ``,"digest":"<hex>"}``."""
    lines = text.split("\n")[:-1]
    return "".join(f'{line[:-1]}{_DIGEST_HEAD}{line_digest(what, line)}"}}\n' for line in lines)


def split_digest(line: str) -> tuple[str, str] | None:
    """``(the line without its digest, the digest)``, or ``None`` for a line that ends in no digest."""
    if len(line) > _DIGEST_TAIL and line.endswith('"}') and line[-_DIGEST_TAIL:].startswith(_DIGEST_HEAD):
        return line[:-_DIGEST_TAIL] + "}", line[-18:-2]
    return None


def lines_of(texts: Sequence[str]) -> str:
    """Records' JSON texts as JSON lines (``""`` for none)."""
    return "\n".join(texts) + "\n" if texts else ""


def policy_digest(policy: Any, reference: Any) -> str:
    """sha256 of the policy's weights (state_dict tensors, in key order) or, for policies
    without weights, of its reference string. Changes whenever the weights change. A many-policy run
    (``reference`` a tuple, ``policy`` the tuple of its policies): the digest of its policies' digests, in order."""
    h = hashlib.sha256()
    if isinstance(reference, tuple):
        for one, ref in zip(policy, reference):
            h.update(policy_digest(one, ref).encode())
        return h.hexdigest()
    if isinstance(policy, HasWeights):
        for key, tensor in sorted(policy.state_dict().items()):
            h.update(key.encode())
            h.update(str(tuple(tensor.shape)).encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    else:
        h.update(repr(reference if isinstance(reference, str) else type(policy).__qualname__).encode())
    return h.hexdigest()


def _write_guard(path: Path, resume: str | None = None):
    """Turns an OSError while writing ``path`` into :func:`~fasteval.run.record_file.write_error`'s error."""
    class Guard:
        def __enter__(self):
            return self

        def __exit__(self, kind, exc, tb):
            if isinstance(exc, OSError) and not isinstance(exc, FastevalError):
                raise write_error(path, exc, path.parent, resume) from None
            return False

    return Guard()


class RunDirectory:
    """Append-only episode log plus atomic manifest and final results for one run."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._episodes = None
        self._errors = None
        self.resume_hint: str | None = None
        """The command that finishes this run (:func:`resume_command`, set by the durable run from its spec), named
        by a write error (disk full); ``fasteval --resume DIR`` when not set."""

    # -- manifest -----------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def has_manifest(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> dict[str, Any]:
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            raise UserInputError(f"--resume {self.path}: no {MANIFEST} there; expected the output folder of an earlier fasteval run.") from None
        except (OSError, ValueError) as exc:
            raise UserInputError(f"--resume {self.path}: {MANIFEST} is unreadable ({exc}).") from None
        if not isinstance(manifest, dict) or not ("what" in manifest or "spec" in manifest):
            raise UserInputError(f"--resume {self.path}: {MANIFEST} is not a fasteval manifest (no 'what', nor an "
                                 f"older fasteval's 'spec').")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        with _write_guard(self.manifest_path, self.resume_hint):
            write_json_atomic(self.manifest_path, manifest)

    def set_status(self, status: str, **extra: Any) -> None:
        manifest = self.read_manifest()
        manifest["status"] = status
        manifest.update(extra)
        self.write_manifest(manifest)

    # -- episode log ----------------------------------------------------------------------
    def open_logs(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserInputError(f"cannot create the output folder {self.path}: {exc.strerror or exc}. "
                                 f"Choose another --output-dir.") from None
        self._episodes = RecordFile(self.path / EPISODES, self.resume_hint)
        self._errors = RecordFile(self.path / ERRORS, self.resume_hint)
        self._episodes.open()
        self._errors.open()

    def cut_torn_tails(self) -> dict[str, int]:
        """Cut each record file back to its last complete line (a kill's torn line, a missing final
        newline), so that the next record is not glued onto it. Returns ``{file name: bytes dropped}``
        for the files that had one."""
        dropped = {name: cut_torn_tail(self.path / name) for name in (EPISODES, ERRORS)}
        return {name: n for name, n in dropped.items() if n}

    def has_records(self) -> bool:
        """Whether the folder holds record files with anything in them."""
        return any((self.path / name).is_file() and (self.path / name).stat().st_size > 0 for name in (EPISODES, ERRORS))

    def append_episode_text(self, text: str) -> None:
        """Append complete JSON lines to ``episodes.jsonl`` (all of them, or none on an error)."""
        self._episodes.append(text)

    def append_errors(self, records: Iterable[dict[str, Any]]) -> None:
        self._errors.append(format_records(list(records)))

    def records(self, run: RunIdentity | None = None, what: str | None = None,
                notes: list[str] | None = None) -> list[dict[str, Any]]:
        """Finished-episode records in the log (a torn last line, even one that parses, is ignored), one per episode.

        With ``run``, every record must be that run's (:meth:`RunIdentity.problem`): a resume refuses
        a folder whose log mixes runs, naming the first lines that do not belong. With ``what`` (the run's what
        digest, :func:`what_digest`), each record's digest is checked: a record that does not match its digest (an
        edited number) is dropped, and if none matches, the run's what was changed under them (an edited
        manifest): refused. Lines that are not records (garbage, NUL bytes) and repeats of an episode are dropped;
        records without a digest (an older fasteval's) are used unchecked. What was dropped, or not checked, is
        said in ``notes``."""
        path = self.path / EPISODES
        if not path.is_file():
            return []
        out: dict[Any, dict[str, Any]] = {}
        foreign: list[str] = []
        garbage, edited, repeated, unchecked, checked = [], [], [], 0, 0
        # only complete lines: a last line without its newline is torn (a resume cuts it off before appending)
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.split("\n")[:-1], start=1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not (isinstance(record, dict) and "episode_ix" in record):
                if line.strip():
                    garbage.append(number)
                continue
            digest = record.pop(DIGEST_KEY, None)
            problem = run.problem(record) if run is not None else None
            if problem is not None:  # another run's record: the folder mixes runs (refused below)
                foreign.append(f"line {number}: {problem}")
                continue
            if digest is None:
                unchecked += 1
            elif what is not None:
                parts = split_digest(line)
                if parts is None or parts[1] != digest or line_digest(what, parts[0]) != digest:
                    edited.append(number)
                    continue
                checked += 1
            record.pop("run_id", None)  # the folder's fact, not the episode's (results hold none)
            key = (record.get("policy"), int(record["episode_ix"]))
            if key in out:  # a repeated line: the first one stands
                repeated.append(number)
                continue
            out[key] = record  # one per (policy, episode)
        if foreign:
            raise UserInputError(
                f"refusing to resume {self.path}: {len(foreign)} record(s) of {path} are not this run's "
                f"({'; '.join(foreign[:3])}{'; ...' if len(foreign) > 3 else ''}). The folder mixes runs; start a "
                f"new run with another --output-dir.")
        if edited and not checked:
            raise UserInputError(
                f"refusing to resume {self.path}: none of the {len(edited)} digested records of {path} matches this "
                f"run's what digest {what}: the run's what (manifest.json: env_kwargs, seed, ...) was changed after "
                f"they were written, and resuming would mix two configurations in one run. Restore manifest.json, or "
                f"start a new run with another --output-dir.")
        if notes is not None:
            lines = lambda numbers: ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")  # noqa: E731
            if garbage:
                notes.append(f"{path}: dropped {len(garbage)} line(s) that are not records (line {lines(garbage)}); "
                             f"their episodes, if any, run again.")
            if edited:
                notes.append(f"{path}: dropped {len(edited)} record(s) whose digest does not match their content (line "
                             f"{lines(edited)}: edited after they were written); their episodes run again.")
            if repeated:
                notes.append(f"{path}: dropped {len(repeated)} repeated record(s) of an episode already recorded (line "
                             f"{lines(repeated)}); the first record of each episode stands.")
            if unchecked and what is not None:
                notes.append(f"{path}: {unchecked} record(s) carry no digest (written by an older fasteval): used "
                             f"without a check.")
        return [out[k] for k in sorted(out, key=lambda key: (key[1], str(key[0])))]

    def close(self) -> None:
        for handle in (self._episodes, self._errors):
            if handle is not None:
                handle.close()
        self._episodes = self._errors = None

    def remove_new_run(self, remove_folder: bool) -> None:
        """Undo a new run that never got past its dry run: remove the files it wrote (and the
        folder, when this run created it and it is empty), so the folder is free again."""
        self.close()
        for name in (MANIFEST, EPISODES, ERRORS, LOCK_NAME):
            try:
                (self.path / name).unlink()
            except FileNotFoundError:
                pass
        if remove_folder:
            try:
                self.path.rmdir()
            except OSError:
                pass  # not empty (something else is there): leave it

    def remove_eval_info(self) -> None:
        """Remove ``eval_info.json`` (an earlier segment's end, or one its manifest could not follow)."""
        try:
            (self.path / EVAL_INFO).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise write_error(self.path / EVAL_INFO, exc, self.path, self.resume_hint) from None

    def write_eval_info(self, document: dict[str, Any]) -> Path:
        path = self.path / EVAL_INFO
        with _write_guard(path, self.resume_hint):
            return write_json_atomic(path, document)


class RunIdentity:
    """What every record of one run shares: its ``run_id`` (from the manifest) and ``seed = seed0 + episode_ix``."""

    def __init__(self, run_id: str | None, seed: int, n_episodes: int, policy_names: Sequence[str] | None = None):
        self.run_id, self.seed, self.n_episodes = run_id, int(seed), int(n_episodes)
        self.policy_names = tuple(policy_names) if policy_names is not None else None
        """A many-policy run's names: every record must name one of them (a one-policy run's name none)."""

    def problem(self, record: dict[str, Any]) -> str | None:
        """Why ``record`` is not this run's, or ``None``."""
        ix = record.get("episode_ix")
        if record.get("run_id") != self.run_id:
            return f"run_id {record.get('run_id')!r}, this run's is {self.run_id!r}"
        policy = record.get("policy")
        if self.policy_names is not None and policy not in self.policy_names:
            return f"policy {policy!r} is not one of this run's {list(self.policy_names)}"
        if self.policy_names is None and policy is not None:
            return f"policy {policy!r}: this run evaluates one policy, its records name none"
        if not isinstance(ix, int) or not 0 <= ix < self.n_episodes:
            return f"episode_ix {ix!r} is not one of this run's 0..{self.n_episodes - 1}"
        if record.get("seed") != self.seed + ix:
            return f"episode {ix} has seed {record.get('seed')!r}, this run's is {self.seed + ix}"
        return None


RESUME_IDENTITY = ("policy_digest", "max_steps")
"""Facts of a run, besides its *what*, that a resume must share: the weights and the step cap the env resolved to."""


def same_value(field: str, a: Any, b: Any) -> bool:
    """Equal as a manifest stores them (JSON: a tuple reads back as a list); checkpoint folders by their
    resolved path."""
    def norm(value: Any) -> Any:
        return json.loads(json.dumps(value, default=str))

    if norm(a) == norm(b):
        return True
    if field == "policy" and isinstance(a, str) and isinstance(b, str) and Path(a).exists() and Path(b).exists():
        return Path(a).resolve() == Path(b).resolve()
    return False


def what_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``[(field, the run's value, this one's)]`` for every *what* field that differs (a field an older
    manifest lacks counts as its default). ``n_episodes`` may grow: a larger one extends the run, except
    under ``design="truncated"``, whose error is spent by its cap and which is valid up to it only."""
    from fasteval.types.spec import LEGACY_WHAT_DEFAULTS, WHAT_FIELDS, What

    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())  # type: ignore[misc]
                for f in dataclasses.fields(What) if f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING}
    defaults.update(LEGACY_WHAT_DEFAULTS)  # a field added later: what its absence meant in older manifests
    out = []
    truncated = "truncated" in (saved.get("design"), now.get("design"))  # valid up to its cap only: -n is fixed
    for key in WHAT_FIELDS:
        had, has = saved.get(key, defaults.get(key)), now.get(key, defaults.get(key))
        if key == "n_episodes" and isinstance(had, int) and isinstance(has, int) and has >= had and not truncated:
            continue
        if not same_value(key, had, has):
            out.append((key, had, has))
    return out


def check_resumable(manifest: dict[str, Any], spec: Any, identity: dict[str, Any], folder: Path) -> None:
    """Refuse to resume when the run would not be the same evaluation: its *what* (any *how* may change;
    a larger ``n_episodes`` extends the run), its policy weights or its resolved step cap differ."""
    from fasteval.run.record import manifest_spec

    diffs = [f"{key}: the original run had {had!r}, this one has {has!r}"
             for key, had, has in what_differences(manifest_spec(manifest), spec.what.to_dict())]
    diffs += [f"{key}: the original run had {manifest.get(key)!r}, this one has {identity.get(key)!r}"
              for key in RESUME_IDENTITY if key in manifest and manifest.get(key) != identity.get(key)]
    if diffs:
        raise UserInputError(
            f"refusing to resume {folder}: this is not the same evaluation ({'; '.join(diffs)}). "
            f"Resume with the original settings and weights, or start a new run with another --output-dir."
        )


def resume_command(folder: str | os.PathLike, spec: Any = None) -> str:
    """The command that finishes the run in ``folder``: ``fasteval --resume DIR``, with
    ``--trust-remote-code`` when ``spec`` names code (a manifest cannot allow it: docs/security.md).
    The one wording of the hint, for the CLI's end of a run and the watchdog's last words."""
    from fasteval.types.trust import needs_trust_from_file

    flag = " --trust-remote-code" if spec is not None and needs_trust_from_file(spec.env, spec.policy) else ""
    return f"fasteval --resume {folder}{flag}"
