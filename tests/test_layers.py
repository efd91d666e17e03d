"""The layering of docs/architecture.md, checked by walking every module's imports.

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

# Layers from the bottom up. A module is matched by its longest prefix in this table.
LAYERS: dict[str, int] = {}
for rank, prefixes in enumerate([
    ["fasteval.kernels"],                                                   # 0 kernels: pure functions over arrays
    ["fasteval.version", "fasteval.errors", "fasteval.spec", "fasteval.results", "fasteval.refs",
     "fasteval.stats", "fasteval.mapping_files"],                           # 1 types: data only
    ["fasteval.core"],                                                      # 2 core: ledger, envs, transfers, the loop
    ["fasteval.policies", "fasteval.recording", "fasteval.lerobot", "fasteval.fast_envs",
     "fasteval.testing"],                                                   # 3 robot steps, loaders, recorders
    ["fasteval.engine", "fasteval.api", "fasteval.durable", "fasteval.rundir", "fasteval.sinks",
     "fasteval.config", "fasteval.paths", "fasteval.episode_files"],        # 4 API: engine composition, run folders
    ["fasteval.cli", "fasteval.compat", "fasteval.sweep", "fasteval.bench", "fasteval.suites"],  # 5 doors
]):
    for prefix in prefixes:
        LAYERS[prefix] = rank
LAYER_NAMES = ["kernels", "types", "core", "robot steps", "API", "doors"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (``fasteval`` itself, the re-exporting package root, is None)."""
    best = None
    for prefix, rank in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rank)
    return None if best is None else best[1]


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
    missing = [module_name(p) for p in SOURCES if module_name(p) != "fasteval" and layer_of(module_name(p)) is None]
    assert not missing, f"modules with no layer in tests/test_layers.py (and docs/architecture.md): {missing}"


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


def test_the_walk_sees_a_violation(tmp_path):
    """The checker itself can fail: a lazy import of a loader from core, and a cycle, are caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from fasteval.policies.loaders import load_policy\n    from . import ledger\n")
    found = fasteval_imports(bad, module="fasteval.core.bad")
    assert found == [(2, "fasteval.policies.loaders"), (3, "fasteval.core.ledger")]
    assert layer_of("fasteval.core.bad") < layer_of("fasteval.policies.loaders")
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_docs_map_matches_this_table():
    """docs/architecture.md's layer table names the same modules, in the same layers, as LAYERS."""
    import re

    doc = (PACKAGE_DIR.parents[1] / "docs" / "architecture.md").read_text()
    names = {"doors": 5, "API": 4, "robot steps": 3, "core": 2, "types": 1, "kernels": 0}
    documented: dict[str, int] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] not in names:
            continue
        for item in re.findall(r"`([^`]+)`", cells[1]):
            if item == "csrc/":
                continue
            documented["fasteval." + item.removesuffix("/").removesuffix(".py").replace("/", ".")] = names[cells[0]]
    assert documented == LAYERS
