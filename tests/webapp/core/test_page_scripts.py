"""The page scripts (static/js) draw what the server computed: no script keeps a list of statuses or outcomes
of its own (issue #22 item 3). A vocabulary the server owns (the Run model's statuses, the sandbox's outcome
enum, a problem set's validation statuses) reaches a page as data: ``json_script`` or a message's fields.

A script may name one word of a vocabulary as a string literal (the candidate filter's "failed" is a query
value, not a run status); two words of one vocabulary in one script are a list, however far apart.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox.result import Outcome
from webapp.problems.models import ProblemSet
from webapp.runs.models import Run

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted((ROOT / "static" / "js").glob("*.js"))

VOCABULARIES = {  # name: (words, the scripts that must not list them)
    "run statuses": (set(Run.Status.values), "*.js"),
    "execution outcomes": ({o.value for o in Outcome}, "*.js"),
    # Only where problem sets are shown: elsewhere "done" is also a run event's kind.
    "validation statuses": (set(ProblemSet.Validation.values), "problem_set*.js"),
}

_REGEX_BEFORE = set("(,=:[!&|?{};+-*%<>~^") | {""}


def string_literals(source: str) -> list[str]:
    """The string literals of a script ('…', "…", `…` without their ${} parts), comments and regular
    expression literals left out."""
    out, i, n = [], 0, len(source)
    previous = ""  # the last significant character of code, to tell a regex literal from a division
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            i = source.find("\n", i)
            i = n if i < 0 else i
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "'\"`":
            j, text = i + 1, []
            while j < n and source[j] != c:
                if source[j] == "\\":
                    text.append(source[j:j + 2])
                    j += 2
                    continue
                if c == "`" and source.startswith("${", j):
                    depth = 1
                    j += 2
                    while j < n and depth:
                        depth += {"{": 1, "}": -1}.get(source[j], 0)
                        j += 1
                    text.append("\0")
                    continue
                text.append(source[j])
                j += 1
            out.append("".join(text))
            i, previous = j + 1, c
        elif c == "/" and previous in _REGEX_BEFORE:
            j, in_class = i + 1, False
            while j < n and (in_class or source[j] != "/") and source[j] != "\n":
                if source[j] == "\\":
                    j += 1
                elif source[j] == "[":
                    in_class = True
                elif source[j] == "]":
                    in_class = False
                j += 1
            i, previous = j + 1, "/"
        else:
            if not c.isspace():
                previous = c if not (c.isalnum() or c in "_$") else "a"
            i += 1
    return out


def test_the_literal_reader_skips_comments_and_regular_expressions():
    source = '''var a = "queued"; // "running"
    /* "failed" */ var b = x / 2 / y, c = / run$/.test(s) ? 'cancelled' : `t ${"no"} x`;'''
    assert string_literals(source) == ["queued", "cancelled", "t \0 x"]


def test_there_are_scripts_to_read():
    assert len(SCRIPTS) >= 5, "static/js moved? this test reads the page scripts there"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_page_script_lists_statuses_or_outcomes_of_its_own(script):
    literals = set(string_literals(script.read_text(encoding="utf-8")))
    for name, (words, scripts) in VOCABULARIES.items():
        if not script.match(scripts):
            continue
        named = sorted(literals & words)
        assert len(named) <= 1, (
            f"{script.name} names the {name} {named} as string literals: pass them to the page as data "
            "(json_script or a message field computed on the server) instead of listing them in the script")


def test_the_run_page_script_names_no_run_status_at_all():
    literals = set(string_literals((ROOT / "static" / "js" / "run_detail.js").read_text(encoding="utf-8")))
    assert not literals & (set(Run.Status.values) - {"failed"}), "run statuses come from json_script run-statuses"
    assert not re.search(r"syntax_error|output_limit", (ROOT / "static" / "js" / "run_detail.js").read_text())
