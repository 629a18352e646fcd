"""The columns of a run, a problem set and a problem are written only by their models' methods.

A supervisor, the Celery tasks and the web requests write these rows from different processes; each
state change is a method of the model (``Run.requeue``, ``ProblemSet.start_validation``, ...) that locks
the row and decides on what it re-reads. This scan of every module of webapp/ outside the apps'
``models.py`` (and migrations) refuses anything else that writes them:

- ``obj.<column> = ...`` (or ``+=``, or ``setattr(obj, ...)``) and ``obj.save(...)`` on a variable that
  holds one of these rows: a parameter annotated with the model, a name assigned from an expression that
  names the model (``Run.objects...``, ``get_object_or_404(Run, ...)``), or one of the usual names
  (``run``, ``ps``, ``problem_set``, ``problem``);
- ``.update(...)``, ``.bulk_update(...)``, ``.update_or_create(...)`` on a query that names the model or
  goes through a related manager of it (``user.runs``, ``ps.problems``).

Creating a row (``objects.create``, ``bulk_create``) gives it its first values and is allowed.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEBAPP = ROOT / "webapp"

GUARDED = ("Run", "ProblemSet", "Problem")
USUAL_NAMES = {"run": "Run", "ps": "ProblemSet", "problem_set": "ProblemSet", "problem": "Problem"}
RELATED_MANAGERS = {"runs": "Run", "problem_sets": "ProblemSet", "problems": "Problem"}
QUERY_WRITES = {"update", "bulk_update", "update_or_create"}


def _columns() -> dict[str, set[str]]:
    from webapp.problems.models import Problem, ProblemSet
    from webapp.runs.models import Run

    columns = {}
    for model in (Run, ProblemSet, Problem):
        fields = model._meta.concrete_fields
        columns[model.__name__] = {f.name for f in fields} | {f.attname for f in fields}
    return columns


def _models_named(node: ast.AST | None) -> set[str]:
    """The guarded models an expression (or an annotation, written as a string or not) names."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {m for m in GUARDED if re.search(rf"\b{m}\b", node.value)}
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in GUARDED:
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute) and sub.attr in RELATED_MANAGERS:
            found.add(RELATED_MANAGERS[sub.attr])
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found |= {m for m in GUARDED if re.fullmatch(rf"{m}( \| None)?", sub.value)}
    return found


def _assigned_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _assigned_names(elt)]
    return []


def _attribute_targets(target: ast.AST) -> list[ast.Attribute]:
    if isinstance(target, ast.Attribute):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [a for elt in target.elts for a in _attribute_targets(elt)]
    return []


class _Scope(ast.NodeVisitor):
    """Finds the writes in one function body (nested functions get a scope of their own that starts
    from the names this one knows)."""

    def __init__(self, columns: dict[str, set[str]], known: dict[str, str], where: str, found: list[str]):
        self.columns, self.known, self.where, self.found = columns, dict(known), where, found

    def _model_of(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.known.get(node.id) or USUAL_NAMES.get(node.id)
        return None

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.where}:{node.lineno}: {what}")

    def _learn(self, targets: list[ast.AST], value: ast.AST | None) -> None:
        named = _models_named(value)
        if len(named) != 1:
            return
        model = named.pop()
        for target in targets:
            for name in _assigned_names(target):
                self.known[name] = model

    def _check_targets(self, targets: list[ast.AST], node: ast.AST) -> None:
        for target in targets:
            for attribute in _attribute_targets(target):
                model = self._model_of(attribute.value)
                if model and attribute.attr in self.columns[model]:
                    self._flag(node, f"{ast.unparse(attribute)} = ... writes a {model} column")

    def visit_FunctionDef(self, node):
        known = dict(self.known)
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for arg in args:
            named = _models_named(arg.annotation)
            if len(named) == 1:
                known[arg.arg] = named.pop()
            else:
                known.pop(arg.arg, None)
        scope = _Scope(self.columns, known, self.where, self.found)
        for statement in node.body:
            scope.visit(statement)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        _Scope(self.columns, self.known, self.where, self.found).visit(node.body)

    def visit_Assign(self, node):
        self.generic_visit(node)
        self._check_targets(node.targets, node)
        self._learn(node.targets, node.value)

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        self._check_targets([node.target], node)
        self._learn([node.target], node.annotation if node.value is None else node.value)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        self._check_targets([node.target], node)

    def visit_For(self, node):
        self._learn([node.target], node.iter)  # for run in Run.objects.filter(...)
        self.generic_visit(node)

    def visit_With(self, node):
        for item in node.items:
            if item.optional_vars is not None:
                self._learn([item.optional_vars], item.context_expr)
        self.generic_visit(node)

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id == "setattr" and node.args:
            model = self._model_of(node.args[0])
            if model:
                self._flag(node, f"setattr({ast.unparse(node.args[0])}, ...) writes a {model} column")
        if not isinstance(func, ast.Attribute):
            return
        if func.attr == "save":
            model = self._model_of(func.value)
            if model:
                self._flag(node, f"{ast.unparse(func)}(...) saves a {model} row")
        elif func.attr in QUERY_WRITES:
            named = _models_named(func.value)
            if named:
                self._flag(node, f".{func.attr}(...) on {ast.unparse(func.value)} writes {', '.join(sorted(named))} rows")


def writes_outside_models(source: str, where: str, columns: dict[str, set[str]] | None = None) -> list[str]:
    """Each write of a guarded row's columns in ``source``, as ``where:line: what``."""
    found: list[str] = []
    _Scope(columns or _columns(), {}, where, found).visit(ast.parse(source))
    return found


def _scanned_modules() -> list[Path]:
    return sorted(p for p in WEBAPP.rglob("*.py") if p.name != "models.py" and "migrations" not in p.parts)


def test_no_module_outside_the_models_writes_run_or_problem_set_columns():
    columns = _columns()
    modules = _scanned_modules()
    assert len(modules) > 50, modules  # the walk really found the web app
    found = [w for path in modules
             for w in writes_outside_models(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), columns)]
    assert found == [], ("these write Run/ProblemSet/Problem columns outside their models; add a method to "
                         "the model (locked where it decides on the row) and call it:\n" + "\n".join(found))


@pytest.mark.parametrize("source", [
    "def f(run_id):\n    run = Run.objects.get(pk=run_id)\n    run.celery_task_id = 'x'\n    run.save()\n",
    "def f(r: 'Run'):\n    r.status = 'queued'\n",
    "def f(x: ProblemSet | None):\n    x.validation_checked += 1\n",
    "def f(pk):\n    locked = ProblemSet.objects.select_for_update().get(pk=pk)\n    locked.save(update_fields=['format'])\n",
    "def f(pk):\n    Run.objects.filter(pk=pk).update(auto_resume=True)\n",
    "def f(ps):\n    ps.problems.filter(split='train').update(excluded=True)\n",
    "def f(rows):\n    Problem.objects.bulk_update(rows, ['split'])\n",
    "def f(ps):\n    ps.import_lines, ps.import_read_bytes = 1, 2\n",
    "def f(problem_set):\n    setattr(problem_set, 'format', 'native')\n",
    "def f(user):\n    for run in user.runs.all():\n        run.notes = ''\n",
    "def f(pk):\n    run = get_object_or_404(Run, pk=pk)\n    def later():\n        run.save()\n    return later\n",
])
def test_the_scan_finds_each_kind_of_write(source):
    assert writes_outside_models(source, "sample.py"), source


@pytest.mark.parametrize("source", [
    "def f(run):\n    run.enqueued = True\n",  # not a column
    "def f(run):\n    run.requeue()\n    run.edit(name='a', notes='')\n",
    "def f(d, ids):\n    d.update(a=1)\n    ids.update(x for x in [])\n",
    "def f(probe):\n    probe.save(update_fields=['task_id'])\n",
    "def f(owner):\n    return Run.objects.create(owner=owner, name='a')\n",
    "def f(self):\n    self.config = {}\n",
])
def test_the_scan_leaves_other_code_alone(source):
    assert writes_outside_models(source, "sample.py") == []


@pytest.mark.django_db
def test_the_admin_shows_the_state_columns_without_a_field_to_change_them(client, tmp_path, settings):
    from webapp.runs.models import Run
    from tests.factories import make_problem_set, make_user

    settings.RUNS_DIR = str(tmp_path)
    staff = make_user("keeper", is_staff=True, is_superuser=True)
    ps = make_problem_set(staff)
    run = Run.objects.create(owner=staff, name="r", problem_set=ps)
    client.force_login(staff)
    for url, editable, shown in ((f"/admin/problems/problemset/{ps.pk}/change/", "name", "validation_status"),
                                 (f"/admin/runs/run/{run.pk}/change/", "notes", "status"),
                                 (f"/admin/problems/problem/{ps.problems.first().pk}/change/", "tags", "excluded")):
        page = client.get(url)
        assert page.status_code == 200, url
        html = page.content.decode()
        assert f'name="{editable}"' in html, url
        assert f'name="{shown}"' not in html and f"field-{shown}" in html, url
