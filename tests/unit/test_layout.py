"""The layout's rules, checked on the tree: pure folders, arrows that run down, no cycles.

* **Pure core.** Every module in a core folder (``monitor/`` itself,
  ``monitor/stats/``, ``monitor/offline/``, ``alerts/``) imports no streaming,
  storage or exporter stack. The edges are whole folders: ``monitor/store/``,
  ``monitor/exporter/``, ``monitor/cli/``, ``monitor/run/``, ``streams/``.
  The one edge module in a core folder is the producer
  SDK ``monitor/emitter.py`` (it is the Kafka client a user imports).
* **Arrows run down.** Under ``monitor/`` only the composition roots
  (``monitor/cli/``, ``monitor/run/``) import ``streams`` or ``alerts``.
* **No cycles** among the project's modules, counting imports inside
  functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

FORBIDDEN = frozenset({"faust", "redis", "prometheus_client", "asyncio", "aiokafka", "kafka", "mode"})
PACKAGES = ("monitor", "streams", "alerts")
CORE_FOLDERS = ("monitor", "monitor/stats", "monitor/offline", "alerts")
# Edges that live beside the core: the producer SDK and the credentials check it (and the
# exporter, the CLI) asks before building a kafka-python client.
EDGE_MODULES_IN_CORE = frozenset({"monitor/emitter.py", "monitor/kafka_auth.py"})
COMPOSITION_ROOTS = ("monitor/cli", "monitor/run")


def _modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _dotted(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_core(relative: Path) -> bool:
    return relative.parent.as_posix() in CORE_FOLDERS and relative.as_posix() not in EDGE_MODULES_IN_CORE


def core_modules() -> list[Path]:
    return [path for path in _modules() if is_core(path)]


def imported_names(source: str, filename: str = "<source>", package: str = "") -> list[tuple[str, int]]:
    """Every module named by an import in ``source`` (anywhere, lazy ones too), with its line.

    Covers ``import x.y``, ``from x.y import z`` (and ``x.y.z`` when z may be a
    module), relative imports resolved against ``package``, and literal
    ``importlib.import_module("x")`` / ``__import__("x")`` calls.
    """
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.args[0].value, node.lineno))
    return found


def forbidden_imports(source: str, filename: str = "<source>") -> list[str]:
    """Top-level names of forbidden imports, with line numbers."""
    hits = []
    seen = set()
    for name, line in imported_names(source, filename):
        if name.split(".")[0] in FORBIDDEN and line not in seen:
            seen.add(line)
            hits.append(f"{name} (line {line})")
    return hits


def import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (a package counts as its ``__init__``)."""
    modules = {_dotted(path): path for path in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = {target for target, _ in imported_names((ROOT / path).read_text(), str(path), package)}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_discovery_finds_the_core():
    modules = {path.as_posix() for path in core_modules()}
    assert "monitor/stats/intervals.py" in modules
    assert "monitor/schema.py" in modules
    assert "alerts/canary.py" in modules
    assert "monitor/store/redis/store.py" not in modules


@pytest.mark.parametrize(
    "relative, core",
    [
        ("monitor/schema.py", True),
        ("monitor/stats/intervals.py", True),
        ("monitor/offline/compare.py", True),
        ("monitor/emitter.py", False),
        ("monitor/store/redis/store.py", False),
        ("monitor/exporter/collector.py", False),
        ("monitor/cli/main.py", False),
        ("alerts/lifecycle.py", True),
        ("alerts/notifiers.py", True),
        ("streams/loop.py", False),
    ],
)
def test_core_classification(relative, core):
    assert is_core(Path(relative)) is core


def test_checker_catches_every_import_form():
    source = (
        "import redis\n"
        "import faust.types as ft\n"
        "from prometheus_client import Counter\n"
        "from asyncio.tasks import sleep\n"
        "import os, kafka\n"
        "import importlib\n"
        "importlib.import_module('aiokafka')\n"
        "from . import redis_helpers\n"
        "import redistools\n"
    )
    hits = forbidden_imports(source)
    assert [hit.split(" ")[0] for hit in hits] == [
        "redis", "faust.types", "prometheus_client", "asyncio.tasks", "kafka", "aiokafka",
    ]


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("relative", core_modules(), ids=lambda p: p.as_posix())
def test_core_module_is_pure(relative):
    source = (ROOT / relative).read_text(encoding="utf-8")
    hits = forbidden_imports(source, filename=str(relative))
    assert not hits, f"{relative} is core but imports {', '.join(hits)}"


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_only_composition_roots_under_monitor_import_streams_or_alerts():
    upward = []
    for name, targets in import_graph().items():
        path = name.replace(".", "/")
        if not name.startswith("monitor") or path.startswith(COMPOSITION_ROOTS):
            continue
        upward += [f"{name} -> {t}" for t in sorted(targets) if t.split(".")[0] in ("streams", "alerts")]
    assert upward == []


def test_no_module_over_400_lines():
    tree = [*_modules(), *(p.relative_to(ROOT) for p in (ROOT / "grafana").glob("*.py"))]
    long = [f"{p} ({n} lines)" for p in tree if (n := len((ROOT / p).read_text().splitlines())) > 400]
    assert long == []


def test_no_test_imports_another_test_module():
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for name, line in imported_names(path.read_text(), str(path)):
            if name.startswith("tests.") and any(part.startswith(("test_", "conftest")) for part in name.split(".")):
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offenders == []
