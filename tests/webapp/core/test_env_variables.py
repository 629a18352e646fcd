"""webapp/env.py VARIABLES is the one list of environment variables: the settings read through it,
every variable the code names is declared there, and README.md's table is generated from it."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from webapp import env

ROOT = Path(__file__).resolve().parents[3]
SOURCE_DIRS = ("webapp", "sandbox", "training", "scripts")


def python_files(*dirs: str):
    for name in dirs:
        yield from (ROOT / name).rglob("*.py")


def test_the_readme_table_is_the_one_generated_from_variables():
    readme = (ROOT / "README.md").read_text()
    assert env.TABLE_START in readme and env.TABLE_END in readme
    table = readme.split(env.TABLE_START + "\n", 1)[1].split("\n" + env.TABLE_END, 1)[0]
    assert table == env.markdown_table(), (
        "README.md's environment table differs from webapp/env.py VARIABLES: run "
        "`.venv/bin/python -m webapp.env --write`")
    assert env.readme_with_table(readme) == readme


def test_the_table_has_a_row_per_variable_with_a_default_and_a_meaning():
    rows = env.markdown_table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(env.VARIABLES)
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 3 and all(cells), row


def test_every_crucible_variable_the_code_names_is_declared():
    named = set()
    for path in python_files(*SOURCE_DIRS):
        tree = ast.parse(path.read_text())
        # getattr(settings, "CRUCIBLE_...") names a Django setting, not a variable
        settings_names = {node.args[1].value for node in ast.walk(tree) if isinstance(node, ast.Call)
                          and ast.unparse(node.func) == "getattr" and len(node.args) > 1
                          and isinstance(node.args[1], ast.Constant)}
        named |= {(node.value, path.relative_to(ROOT)) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and re.fullmatch(r"CRUCIBLE_[A-Z0-9_]+", node.value) and node.value not in settings_names}
    assert len({name for name, _ in named}) > 10  # the scan found the code's variables
    undeclared = sorted(f"{name} ({path})" for name, path in named if name not in env.VARIABLES)
    assert not undeclared, f"declare these in webapp/env.py VARIABLES: {undeclared}"


def environment_reads(tree: ast.AST):
    """Variable names a module reads: os.environ.get("X"), os.environ["X"], os.getenv("X"),
    env.read/get_int/get_bool/get_list("X") and os.environ.setdefault("X", ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv", "os.environ.setdefault") or re.fullmatch(
                    r"(env|envmod)\.(read|is_set|get_int|get_bool|get_list)", func):
                yield node.args[0].value
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.slice, ast.Constant):
            yield node.slice.value


def test_every_variable_the_settings_and_the_launcher_read_is_declared():
    read = set()
    for path in [*(ROOT / "webapp" / "settings").glob("*.py"), ROOT / "webapp" / "env.py",
                 ROOT / "webapp" / "launcher.py"]:
        read |= set(environment_reads(ast.parse(path.read_text())))
    assert {"DEBUG", "SECURE_COOKIES", "CSRF_TRUSTED_ORIGINS", "CRUCIBLE_GPUS_PER_RUN", "PORT"} <= read
    # REDIS_URL is also written for child processes; the rest must be declared.
    assert sorted(read - set(env.VARIABLES)) == []


def test_the_settings_read_their_variables_through_env_read():
    for path in (ROOT / "webapp" / "settings").glob("*.py"):
        calls = [ast.unparse(node.func) for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call)]
        assert not [c for c in calls if re.fullmatch(r"env\.get_(int|bool|list)", c)], (
            f"{path.name}: read declared variables with env.read(NAME), which takes the default and bounds "
            "from VARIABLES")


@pytest.mark.parametrize("name", [n for n, v in env.VARIABLES.items() if v.default is not None])
def test_read_gives_the_declared_default_when_a_variable_is_unset(name, monkeypatch):
    monkeypatch.delenv(name, raising=False)
    assert env.read(name) == env.VARIABLES[name].default


def test_read_parses_a_value_by_the_type_of_its_default_and_checks_the_declared_bounds(monkeypatch):
    monkeypatch.setenv("CRUCIBLE_PROBE_MAX_SAMPLES", "12")
    monkeypatch.setenv("DEBUG", "yes")
    monkeypatch.setenv("ALLOWED_HOSTS", "a.example, b.example")
    assert (env.read("CRUCIBLE_PROBE_MAX_SAMPLES"), env.read("DEBUG"), env.read("ALLOWED_HOSTS")) == \
        (12, True, ["a.example", "b.example"])
    monkeypatch.setenv("CRUCIBLE_PROBE_MAX_SAMPLES", "1025")  # declared maximum 1024
    with pytest.raises(env.ConfigurationError, match="CRUCIBLE_PROBE_MAX_SAMPLES='1025'.*from 1 to 1024"):
        env.read("CRUCIBLE_PROBE_MAX_SAMPLES")
    with pytest.raises(KeyError):
        env.read("CRUCIBLE_NOT_DECLARED")


def test_the_library_variables_show_the_libraries_own_defaults():
    from sandbox import environments, remote
    from training.engines import vllm_server

    names = {remote.TOKEN_ENV, remote.ENDPOINTS_ENV, environments.ENV_DIR_ENV, vllm_server.PYTHON_ENV}
    assert names <= set(env.VARIABLES)
    python = vllm_server.DEFAULT_PYTHON.relative_to(ROOT)
    assert env.VARIABLES[vllm_server.PYTHON_ENV].shown_default() == f"`{python}`"


def test_a_bad_value_stops_the_settings_naming_the_variable_with_its_declared_bounds(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    environ.update(CRUCIBLE_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="webapp.settings.local",
                   REDIS_URL="redis://127.0.0.1:6379/0", CRUCIBLE_GPUS_PER_RUN="65")
    code = "import django; django.setup()"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "CRUCIBLE_GPUS_PER_RUN='65': expected a number from 1 to 64" in done.stderr
