"""Layering (STYLE.md "Layers and boundaries"): webapp -> training -> sandbox, never the other way.

Each library is imported, every module of it, in a fresh interpreter, and the modules it must not pull
in are looked for in `sys.modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
