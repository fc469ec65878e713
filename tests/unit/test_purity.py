"""Pure core, thin edges: core modules import no streaming, storage or exporter stack.

Modules are discovered by globbing, so a new module under monitor/ or alerts/
is covered the moment it exists; only the edge modules listed here are exempt.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = frozenset({"faust", "redis", "prometheus_client", "asyncio", "aiokafka", "kafka"})

# Edge modules (or packages of that name) that may talk to Kafka, Redis, HTTP.
MONITOR_EDGES = frozenset({"cli", "store_redis", "exporter", "exporter_cmd", "emitter", "loaders", "run_cmd"})
ALERTS_EDGE_PREFIXES = ("notifiers", "engine", "commands")
EDGE_PREFIX = "edge_"


def _is_edge(relative: Path) -> bool:
    package, *rest = relative.parts
    first = Path(rest[0]).stem if rest else ""
    if any(Path(part).stem.startswith(EDGE_PREFIX) for part in rest):
        return True
    if package == "monitor":
        return first in MONITOR_EDGES
    if package == "alerts":
        return first.startswith(ALERTS_EDGE_PREFIXES)
    return False


def core_modules() -> list[Path]:
    found = []
    for package in ("monitor", "alerts"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if not _is_edge(relative):
                found.append(relative)
    return found


def forbidden_imports(source: str, filename: str = "<source>") -> list[str]:
    """Top-level names of forbidden imports, with line numbers.

    Covers `import x.y`, `from x.y import z` and literal `importlib.import_module("x")`
    / `__import__("x")` calls; relative imports are internal and allowed.
    """
    hits = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        hits += [f"{name} (line {node.lineno})" for name in names if name.split(".")[0] in FORBIDDEN]
    return hits


def test_discovery_finds_the_core():
    modules = {path.as_posix() for path in core_modules()}
    assert "monitor/stats/intervals.py" in modules
    assert "monitor/stats/bootstrap.py" in modules


@pytest.mark.parametrize(
    "relative, edge",
    [
        ("monitor/cli.py", True),
        ("monitor/store_redis.py", True),
        ("monitor/exporter.py", True),
        ("monitor/emitter.py", True),
        ("monitor/loaders.py", True),
        ("monitor/edge_http.py", True),
        ("monitor/stores/edge_redis.py", True),
        ("monitor/stats/intervals.py", False),
        ("monitor/store_memory.py", False),
        ("alerts/notifiers.py", True),
        ("alerts/notifiers_webhook.py", True),
        ("alerts/engine.py", True),
        ("alerts/engine_runner.py", True),
        ("alerts/detectors.py", False),
        ("alerts/lifecycle.py", False),
    ],
)
def test_edge_classification(relative, edge):
    assert _is_edge(Path(relative)) is edge


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


@pytest.mark.parametrize("relative", core_modules(), ids=lambda p: p.as_posix())
def test_core_module_is_pure(relative):
    source = (ROOT / relative).read_text(encoding="utf-8")
    hits = forbidden_imports(source, filename=str(relative))
    assert not hits, f"{relative} is core (not an edge module) but imports {', '.join(hits)}"
