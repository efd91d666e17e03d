"""The layering of docs/architecture.md, checked by walking every module's imports, and its layer table
checked against the tree.

Each module of ``src/fasteval`` belongs to one layer; a module may import only from its own
layer and the layers below it. The walk reads the source (``ast``), so it sees lazy imports
inside functions too, and it needs none of the optional packages installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fasteval

PACKAGE_DIR = Path(fasteval.__file__).parent

# Layers from the bottom up, one folder each: a module's layer is the folder it sits in
# (``fasteval/<folder>/...``). The package root and the file beside it are not in a layer:
# ``__init__`` re-exports the API, ``version`` holds the version.
LAYER_NAMES = ["kernels", "types", "core", "robot steps", "API", "render", "doors"]
FOLDERS: dict[str, int] = {
    "kernels": 0,   # pure functions over arrays (NumPy reference, Cython, Numba)
    "types": 1,     # data and pure helpers
    "core": 2,      # ledger, envs and workers, transfers, graphs, the one step sequence
    "robot": 3,     # policy loaders, the policy runner, recorders, fast envs
    "testing": 3,   # fixtures: known-answer envs, fault plans, fakes (imports nothing above core)
    "run": 4,       # engine composition, evaluate/Evaluator, run folders, sinks
    "render": 5,    # views of documents: HTML pages, Markdown, terminal tables, plots
    "doors": 6,     # CLI, LeRobot flags, sweeps, bench, suites
    "integrations": 6,  # doors for training loops: SB3's EvalCallback, TorchRL's trainer hook, lerobot-train
}
ROOT_MODULES = {"fasteval", "fasteval.version"}
# kept for the docs test: every folder as its dotted prefix
LAYERS: dict[str, int] = {f"fasteval.{folder}": rank for folder, rank in FOLDERS.items()}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """The layer of ``module``: the rank of the folder it sits in (None for the root modules,
    and for a module outside every layer folder, which ``test_every_module_has_a_layer`` flags)."""
    parts = module.split(".")
    if module in ROOT_MODULES or len(parts) < 2:
        return None
    return FOLDERS.get(parts[1])


def fasteval_imports(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """``(line, module)`` for every import of a fasteval module in the file, lazy ones included.

    ``module`` is the file's dotted name (default: from its place in the package).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "fasteval"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "fasteval":
                continue
            if (PACKAGE_DIR.parent / target.replace(".", "/")).is_dir():  # `from pkg import x`: x may be a module
                found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return found


SOURCES = sorted(p for p in PACKAGE_DIR.rglob("*.py"))


def test_every_module_has_a_layer():
    """Every module sits in the folder of its layer: nothing but the root modules lies flat."""
    missing = [module_name(p) for p in SOURCES if module_name(p) not in ROOT_MODULES and layer_of(module_name(p)) is None]
    assert not missing, f"modules outside every layer folder (tests/test_layers.py, docs/architecture.md): {missing}"


def test_root_modules_import_only_the_root_and_types():
    """``version`` imports nothing of fasteval; the root re-exports types and the API lazily."""
    for path in SOURCES:
        here = module_name(path)
        if here not in ROOT_MODULES or here == "fasteval":
            continue
        assert [t for _l, t in fasteval_imports(path)] == [], f"{here} imports fasteval modules"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_point_down(path: Path):
    here = module_name(path)
    mine = layer_of(here)
    if mine is None:
        return  # the package root re-exports the API lazily
    wrong = []
    for line, target in fasteval_imports(path):
        if target == "fasteval":
            wrong.append(f"line {line}: imports the package root `fasteval` (import the module you need)")
            continue
        theirs = layer_of(target)
        if theirs is not None and theirs > mine:
            wrong.append(f"line {line}: {here} ({LAYER_NAMES[mine]}) imports {target} ({LAYER_NAMES[theirs]})")
    assert not wrong, "\n".join(wrong)


def _graph(level: str) -> dict[str, set[str]]:
    """Import graph between packages (``level='package'``) or between modules."""
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        here = module_name(path)
        node = here.rsplit(".", 1)[0] if level == "package" and path.name != "__init__.py" else here
        for _line, target in fasteval_imports(path):
            other = target
            if level == "package":
                known = {module_name(p) for p in SOURCES}
                other = target if target in known and (PACKAGE_DIR.parent / target.replace(".", "/")).is_dir() \
                    else target.rsplit(".", 1)[0]
            if other != node and other != "fasteval":
                graph.setdefault(node, set()).add(other)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


@pytest.mark.parametrize("level", ["package", "module"])
def test_no_import_cycles(level):
    cycle = _find_cycle(_graph(level))
    assert cycle is None, f"{level} import cycle: " + " -> ".join(cycle)


def test_package_graph_sees_every_layer_folder():
    """Each layer folder is its own node, so a tie between, say, run/ and core/ is an edge the
    cycle check can see (a flat folder of modules used to fold them into one node)."""
    graph = _graph("package")
    assert "fasteval.core" in graph.get("fasteval.run", set())
    assert "fasteval.run" in graph.get("fasteval.doors", set())
    assert not any(node == "fasteval" for node in graph if node != "fasteval")


def test_the_walk_sees_a_violation(tmp_path):
    """The checker itself can fail: a lazy import of a loader from core, and a cycle, are caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from fasteval.robot.policies.loaders import load_policy\n    from . import ledger\n")
    found = fasteval_imports(bad, module="fasteval.core.bad")
    assert found == [(2, "fasteval.robot.policies.loaders"), (3, "fasteval.core.ledger")]
    assert layer_of("fasteval.core.bad") < layer_of("fasteval.robot.policies.loaders")
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_docs_map_matches_this_table():
    """docs/architecture.md's layer table names the same modules, in the same layers, as LAYERS."""
    import re

    doc = (PACKAGE_DIR.parents[1] / "docs" / "architecture.md").read_text()
    names = {"doors": 6, "render": 5, "API": 4, "robot steps": 3, "fixtures": 3, "core": 2, "types": 1, "kernels": 0}
    documented: dict[str, int] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] not in names:
            continue
        for item in re.findall(r"`([^`]+)`", cells[1]):
            if item == "csrc/":
                continue
            if item.endswith("/"):  # a layer's folder; sub-folders are named in the third column
                documented["fasteval." + item.removesuffix("/")] = names[cells[0]]
    assert documented == LAYERS


def _layer_rows() -> dict[str, str]:
    """docs/architecture.md's layer table: ``folder -> its "holds" cell``."""
    import re

    doc = (PACKAGE_DIR.parents[1] / "docs" / "architecture.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        folder = re.fullmatch(r"`([a-z_]+)/`(?: \(\+ `csrc/`\))?", cells[1]) if len(cells) >= 3 else None
        if folder:
            rows[folder.group(1)] = cells[2]
    return rows


def test_docs_layer_table_matches_the_tree():
    """Every file or folder a layer's row names exists in that layer's folder, and every sub-package of a
    layer folder is named in its row: the table is the tree, not a memory of it."""
    import fnmatch
    import re

    rows = _layer_rows()
    assert set(rows) == set(FOLDERS)
    wrong = []
    for folder, holds in rows.items():
        root = PACKAGE_DIR / folder
        files = [p.relative_to(root).as_posix() for p in root.rglob("*.py")]
        dirs = [p.relative_to(root).as_posix() + "/" for p in root.rglob("*") if p.is_dir() and (p / "__init__.py").exists()]
        for name in re.findall(r"`([\w*./]+(?:\.py|/))`", holds):
            name = name.removeprefix(f"{folder}/")
            pool = dirs if name.endswith("/") else files
            if not any(fnmatch.fnmatch(have, name) or fnmatch.fnmatch(have, f"*/{name}") for have in pool):
                wrong.append(f"{folder}/ row names `{name}`, which is not in src/fasteval/{folder}/")
        for sub in dirs:
            if "/" in sub.rstrip("/"):
                continue  # a sub-package's own sub-folders are its business
            if f"`{sub}`" not in holds:
                wrong.append(f"src/fasteval/{folder}/{sub} is not named in the {folder}/ row")
    assert not wrong, "docs/architecture.md vs the tree:\n" + "\n".join(wrong)


def test_files_the_layers_moved_stay_in_their_layer():
    """Issue 29's moves: the chunk queue and rollout buffer are robot steps (core imports neither), and
    every renderer of records (HTML pages, Markdown, terminal report tables) is in ``render/``."""
    assert not (PACKAGE_DIR / "core" / "chunk_queue.py").exists() and not (PACKAGE_DIR / "core" / "rollout_buffer.py").exists()
    assert (PACKAGE_DIR / "robot" / "buffers" / "chunk_queue.py").exists()
    assert (PACKAGE_DIR / "robot" / "buffers" / "rollout_buffer.py").exists()
    renderers = {"render_markdown", "render_table", "format_report", "format_machine", "text_table", "write_run_report",
                 "write_sweep_report", "write_compare_report", "success_figure", "returns_figure"}
    outside = []
    for path in SOURCES:
        if module_name(path).startswith("fasteval.render"):
            continue
        text = path.read_text()
        tree = ast.parse(text)
        outside += [f"{module_name(path)}.{node.name}" for node in ast.walk(tree)
                    if isinstance(node, ast.FunctionDef) and node.name in renderers]
        if "<!doctype html" in text.lower():
            outside.append(f"{module_name(path)} writes HTML")
    assert not outside, f"renderers outside fasteval/render/: {outside}"


ENV_KIND_WORDS = ("mujoco", "metaworld", "meta-world", "gym_pusht", "gym_aloha", "ale_py", "display", "headless")


def env_kind_words(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` for every name or string in the file's code (docstrings left out) that names an env kind."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            text = node.name
        elif isinstance(node, ast.alias):
            text = node.name
        else:
            continue
        if any(word in text.lower() for word in ENV_KIND_WORDS):
            found.append((node.lineno, text))
    return found


@pytest.mark.parametrize("path", [p for p in SOURCES if module_name(p).startswith("fasteval.core.")],
                         ids=lambda p: module_name(p))
def test_core_knows_no_kind_of_env(path: Path):
    """Plugin namespaces, MuJoCo and headless rendering are the env layer's (``robot/env_kinds/``): core builds an env through the ``EnvKinds`` its parts plug in."""
    assert env_kind_words(path) == []


def test_the_env_kind_walk_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""Mentions MuJoCo in a docstring: fine."""\nMUJOCO_MODULES = ("mujoco",)\n'
                   'def f():\n    """MUJOCO_GL too."""\n    return {"gym_pusht": 1}\n')
    assert env_kind_words(bad) == [(2, "MUJOCO_MODULES"), (2, "mujoco"), (5, "gym_pusht")]
