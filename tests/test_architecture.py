"""The package's shape: imports flow from the CLI down, with no cycle, and no
module grows past 500 lines (docs/architecture.md draws the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "brewkb"

LAYERS = [
    ["cli"],
    ["serve"],
    ["api"],
    ["run"],
    ["search"],
    ["stages"],
    ["agents"],
    ["envs"],
    ["retrieval"],
    ["llm"],
    ["kb", "lint", "isolation"],
    ["git", "trajectories"],
    ["recipes", "config", "events"],
    ["errors", "fsutil", "aio"],
]
"""Top to bottom: a module may import its own subsystem and any layer below
its own, never one above or beside it."""

MAX_LINES = 500
MAX_TOP_LEVEL = 10


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every brewkb module each module imports, wherever the import sits
    (module level, inside a function, or for type checking only)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found: list[str] = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for target in found:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name and target.startswith("brewkb."):
                    targets.add(target)
        graph[name] = targets
    return graph


def _subsystem(module: str) -> str:
    return module.split(".")[1]


def _layer(module: str) -> int:
    return next(n for n, layer in enumerate(LAYERS) if _subsystem(module) in layer)


def test_every_subsystem_has_a_layer() -> None:
    subsystems = {_subsystem(m) for m in _modules() if m.count(".") >= 1 and m != "brewkb.__main__"}
    placed = {s for layer in LAYERS for s in layer}
    assert subsystems == placed


def test_imports_only_go_down() -> None:
    graph = _imports(_modules())
    upward = sorted(f"{m} imports {t}" for m, targets in graph.items() if m.count(".") >= 1
                    and m != "brewkb.__main__" for t in targets
                    if _subsystem(t) != _subsystem(m) and _layer(t) <= _layer(m))
    assert upward == []


def test_no_import_cycle() -> None:
    graph = _imports(_modules())
    graph.pop("brewkb", None)  # the public API names every module lazily
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []


def test_modules_stay_small_and_the_top_level_stays_short() -> None:
    modules = _modules()
    long = sorted(f"{m}: {len(p.read_text(encoding='utf-8').splitlines())}" for m, p in modules.items()
                  if len(p.read_text(encoding="utf-8").splitlines()) > MAX_LINES)
    assert long == []
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert len(top) <= MAX_TOP_LEVEL, top


def test_every_subpackage_says_what_it_owns_and_may_import() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "import" in doc, f"{init} does not say what it may import"
