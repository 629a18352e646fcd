"""Fixtures for problem-set tests: sample files (S1's importer samples) and an upload helper."""
import gzip
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.factories import jsonl, make_problem_set

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "tests" / "sandbox" / "data"

# Two tiny native problems whose verdicts are known: `good` passes its reference and fails empty;
# `vacuous` has a test that checks nothing, so an empty solution passes it.
GOOD = {"id": "add", "kind": "function", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n",
        "entry_point": "add", "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        "reference_solution": "def add(a, b):\n    return a + b\n", "split": "train", "tags": ["math", "easy"]}
ECHO = {"id": "echo-sum", "kind": "stdio", "prompt": "Read two integers and print their sum.",
        "test_cases": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}],
        "reference_solution": "a, b = map(int, input().split())\nprint(a + b)\n", "split": "heldout",
        "tags": ["io"]}
WRONG = {"id": "wrong-ref", "kind": "function", "prompt": "def sub(a, b):\n    pass\n", "entry_point": "sub",
         "tests": ["assert sub(3, 1) == 2"], "reference_solution": "def sub(a, b):\n    return a + b\n",
         "split": "train"}
VACUOUS = {"id": "vacuous", "kind": "function", "prompt": "def noop():\n    pass\n", "entry_point": "noop",
           "tests": ["assert True"], "reference_solution": "def noop():\n    return None\n", "split": "heldout"}


def upload_file(content: bytes, name: str = "problems.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/octet-stream")


@pytest.fixture
def samples() -> Path:
    if not (SAMPLES / "native.jsonl").exists():
        pytest.skip(f"the importer samples under {SAMPLES} are missing")
    return SAMPLES


@pytest.fixture
def make_set(user):
    """make_set(*problem_dicts, owner=user, name="set") -> ProblemSet (validation not queued; GOOD and ECHO
    when no problem is given)."""
    def make(*objects, owner=None, name="set"):
        return make_problem_set(owner or user, name, jsonl(*(objects or (GOOD, ECHO))))
    return make


@pytest.fixture
def gz():
    return gzip.compress
