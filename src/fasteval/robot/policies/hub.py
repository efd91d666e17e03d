"""``hf://org/repo[@revision]`` policy references: a Hugging Face Hub snapshot, loaded like a checkpoint folder.

The reference resolves with ``huggingface_hub.snapshot_download`` to a local folder, which is then
loaded exactly like a local checkpoint folder (``config.json`` + ``model.safetensors``, plus an
optional ``normalization.safetensors``). Needs the ``hub`` extra: ``./scripts/install.sh hub``.

* ``HF_HUB_OFFLINE=1`` (read at call time): only the local cache is used (``local_files_only``);
  a snapshot that is not cached is an error that says how to fetch it.
* The cache folder is read at call time too: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``~/.cache/huggingface/hub`` (the hub's own layout: ``models--org--repo/snapshots/<commit>/...``,
  with ``refs/<branch or tag>`` holding the commit a name points to).
* ``@revision`` is a branch, a tag or a commit hash; without it, ``main``.

A reference is resolved once per process and cache folder (later calls reuse the folder).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from fasteval.types.errors import PolicyLoadError, UserInputError

HF_PREFIX = "hf://"
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_TRUE = {"1", "on", "yes", "true"}


def is_hf_ref(ref: object) -> bool:
    return isinstance(ref, str) and ref.startswith(HF_PREFIX)


def parse_hf_ref(ref: str) -> tuple[str, str | None]:
    """``hf://org/repo@rev`` -> (``org/repo``, ``rev``); ``rev`` is ``None`` when absent."""
    body = ref[len(HF_PREFIX):]
    repo_id, at, revision = body.partition("@")
    if not _REPO_RE.match(repo_id) or (at and not revision) or "@" in revision:
        raise UserInputError(f"policy {ref!r}: expected hf://org/repo or hf://org/repo@revision "
                             f"(revision: a branch, a tag or a commit hash).")
    return repo_id, (revision or None)


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def resolve_hf_ref(ref: str) -> Path:
    """The local snapshot folder of ``ref`` (downloaded if needed and allowed). Raises PolicyLoadError."""
    repo_id, revision = parse_hf_ref(ref)
    try:
        return _resolve(repo_id, revision, str(hub_cache_dir()), hub_offline())
    except PolicyLoadError as exc:
        if revision is None and not Path(repo_id).exists():  # LeRobot's --policy.path: a local folder, else a hub id
            raise PolicyLoadError(f"{local_folder_note(repo_id)} {exc}") from None
        raise


def local_folder_note(repo_id: str) -> str:
    """What a missing local folder named like hub id ``repo_id`` says before the hub's error (``--policy.path``
    reads a local folder first, then the hub): that no such folder exists, and why."""
    parent, name = Path(repo_id).parent, Path(repo_id).name
    why = f"{parent}/ holds no {name!r}" if parent.is_dir() else f"there is no folder {parent}/"
    return f"policy {repo_id}: no such local folder ({why}); as a hub id,"


@functools.lru_cache(maxsize=64)
def _resolve(repo_id: str, revision: str | None, cache_dir: str, offline: bool) -> Path:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub import errors as hf_errors
    except ImportError:
        raise PolicyLoadError(
            f"policy hf://{repo_id}: huggingface_hub is not installed. Install it with "
            f"`./scripts/install.sh hub` (or `pip install huggingface_hub`)."
        ) from None
    where = f"hf://{repo_id}" + (f"@{revision}" if revision else "")
    try:
        path = snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=offline)
    except hf_errors.LocalEntryNotFoundError:
        if offline:
            raise PolicyLoadError(
                f"policy {where}: not in the local hub cache {cache_dir} and HF_HUB_OFFLINE is set. Download it "
                f"first (`hf download {repo_id}" + (f" --revision {revision}" if revision else "")
                + "`), point HF_HUB_CACHE / HF_HOME at the cache that holds it, or unset HF_HUB_OFFLINE."
            ) from None
        raise PolicyLoadError(f"policy {where}: could not reach the hub and it is not in the local cache {cache_dir}. "
                              f"Check the network, or set HF_HUB_CACHE / HF_HOME to a cache that holds it.") from None
    except hf_errors.RevisionNotFoundError:
        raise PolicyLoadError(f"policy {where}: the repository has no revision {revision!r}.") from None
    except hf_errors.RepositoryNotFoundError:
        raise PolicyLoadError(f"policy {where}: no such repository on the hub (or it is private: log in with "
                              f"`hf auth login`).") from None
    except (hf_errors.HfHubHTTPError, OSError, ValueError) as exc:
        raise PolicyLoadError(f"policy {where}: download failed: {type(exc).__name__}: {exc}") from None
    return Path(path)
