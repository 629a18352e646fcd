"""Layering (STYLE.md "Layers and boundaries"): webapp -> training -> sandbox, never the other way.

Each library is imported, every module of it, in a fresh interpreter, and the modules it must not pull
in are looked for in `sys.modules`.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IMPORT_ALL = """
import importlib, json, pkgutil, sys
pkg = importlib.import_module({package!r})
names = [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
         if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps({{"modules": names,
                  "forbidden": sorted(m for m in {forbidden!r} if m in sys.modules)}}))
"""


def _import_everything(package: str, forbidden: tuple[str, ...]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL.format(package=package, forbidden=forbidden)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("package,forbidden", [
    ("sandbox", ("django", "torch", "training", "webapp", "celery", "channels")),
    ("training", ("django", "webapp", "celery", "channels")),
])
def test_a_library_imports_nothing_from_the_layers_above_it(package, forbidden):
    found = _import_everything(package, forbidden)
    assert len(found["modules"]) > 3, found  # the walk really imported the package's modules
    assert found["forbidden"] == [], f"importing {package} pulled in {found['forbidden']}"


def test_the_web_server_does_not_load_torch():
    # The web process launches `python -m training` as a child; torch costs it seconds and ~0.3 GB to import,
    # paid only where a run page offers the what-if panel (webapp.runs.rescore.warm_up).
    code = ("import django, sys; django.setup(); import webapp.urls, webapp.asgi, webapp.runs.tasks; "
            "print('torch' in sys.modules)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings.test"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


# --- no circles inside a floor -------------------------------------------------------------------

def _import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports, read from the source (ast): imports at module
    level and inside functions alike, since a deferred import only hides a circle. An import names
    the deepest module it reaches (`from sandbox.formats import apps` -> `sandbox.formats.apps`,
    `from sandbox.problems import Problem` -> `sandbox.problems`)."""
    base = Path(ROOT)
    paths = {}
    for path in sorted((base / package).rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parent = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1])
                    source = ".".join(filter(None, [parent, node.module]))
                else:
                    source = node.module or ""
                targets += [f"{source}.{alias.name}" for alias in node.names]
        graph[name] = set()
        for target in targets:
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (as a path that ends where it starts) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    circles = []
    for group in groups:
        members, start = set(group), min(group)
        path, seen = [start], {start}
        while True:  # walk inside the group until a module repeats
            nxt = min(n for n in graph[path[-1]] if n in members)
            path.append(nxt)
            if nxt in seen:
                circles.append(path[path.index(nxt):])
                break
            seen.add(nxt)
    return circles


def test_the_import_graph_finds_a_deferred_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import g\n")
    (pkg / "b.py").write_text("def g():\n    from . import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    graph = _import_graph("pkg")
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]


@pytest.mark.parametrize("package", ["sandbox", "training", "webapp"])
def test_a_library_has_no_import_circles(package):
    graph = _import_graph(package)
    assert len(graph) > 10 and sum(map(len, graph.values())) > 10  # it read modules and their imports
    assert _cycles(graph) == [], f"modules of {package}/ that import each other (deferred imports too)"


def test_no_module_of_the_web_app_imports_a_tasks_module():
    # Tasks are the top of each app: a module publishes a durable job by its task name (webapp.core.jobs),
    # so the tasks that call into it never have to be imported back.
    graph = _import_graph("webapp")
    importers = {name: sorted(t for t in targets if t.endswith(".tasks")) for name, targets in graph.items()}
    assert {name: tasks for name, tasks in importers.items() if tasks} == {}


def test_problems_is_a_leaf_of_the_sandbox():
    # The Problem model imports nothing of the sandbox; reading and writing files is sandbox.formats'.
    assert _import_graph("sandbox")["sandbox.problems"] == set()


def _app_imports(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(app, app) -> the module imports from the first app into the second, for apps of `webapp/` (its
    packages and top-level modules: `webapp.problems`, `webapp.runs`, `webapp.urls`, ...)."""
    def app(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for source, targets in graph.items():
        for target in targets:
            if app(source) != app(target):
                edges.setdefault((app(source), app(target)), []).append((source, target))
    return edges


def test_no_two_apps_of_the_web_app_import_each_other():
    # Modules may not circle, and neither may apps: problems is below runs (a run trains on a set), and the
    # difficulty probes, which build on both, are an app above them (webapp.probes).
    edges = _app_imports(_import_graph("webapp"))
    assert ("webapp.runs", "webapp.problems") in edges  # the check sees the imports it is about
    both_ways = {pair: sorted(edges[pair] + edges[pair[::-1]]) for pair in edges
                 if pair[::-1] in edges and pair < pair[::-1]}
    assert both_ways == {}, "apps of webapp/ that import each other"
    assert ("webapp.problems", "webapp.runs") not in edges
