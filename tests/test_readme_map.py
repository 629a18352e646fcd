"""README's "Where things are" map names real code: every `module.function` (or `module.Class.method`) it
names in backticks, under sandbox/, training/ or webapp/, imports and resolves (web app modules under the
test settings, as the web app's tests load them)."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sandbox", "training", "webapp")
DOTTED = re.compile(r"`((?:%s)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`" % "|".join(PACKAGES))


def map_section(readme: str) -> str:
    """The text of the "Where things are" section (up to the next heading of its level or above)."""
    match = re.search(r"^(#+) Where things are\s*$", readme, re.MULTILINE)
    assert match, 'README.md has no "Where things are" section'
    level = len(match.group(1))
    rest = readme[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


def named(section: str) -> list[str]:
    return sorted(set(DOTTED.findall(section)))


def resolve(dotted: str):
    """Import the longest module prefix of ``dotted`` and getattr the rest; raises naming what is missing."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
                continue  # not a module: try a shorter prefix
            raise
        for i, attr in enumerate(parts[cut:], start=cut):
            if not hasattr(obj, attr):
                raise AttributeError(f"{'.'.join(parts[:i])} has no {attr!r}")
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module of {dotted} can be imported")


NAMES = named(map_section((ROOT / "README.md").read_text(encoding="utf-8")))


def test_the_map_names_the_launch_path_and_where_things_are_made():
    assert len(NAMES) >= 20, NAMES
    for needed in ("webapp.runs.views.run_new", "training.trainer.train", "webapp.runs.messages.run_message",
                   "training.rewards.REWARDS", "sandbox.runner.Runner.submit_batch", "training.metrics.METRICS"):
        assert needed in NAMES, f"the map no longer names {needed}"


@pytest.mark.parametrize("dotted", NAMES)
def test_each_name_in_the_map_exists(dotted):
    assert resolve(dotted) is not None


def test_a_name_that_does_not_exist_is_caught():
    with pytest.raises(AttributeError, match=r"training\.trainer has no 'no_such_function'"):
        resolve("training.trainer.no_such_function")
    with pytest.raises(AttributeError, match=r"webapp\.runs\.models\.Run has no 'no_such_method'"):
        resolve("webapp.runs.models.Run.no_such_method")
    assert named("see `webapp.runs.views.run_new` and `python -m training run`, `run-<id>`") == [
        "webapp.runs.views.run_new"]
