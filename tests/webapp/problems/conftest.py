"""Fixtures for problem-set tests: sample files (S1's importer samples) and an upload helper."""
import gzip
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

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


def jsonl(*objects) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objects).encode()


def upload_file(content: bytes, name: str = "problems.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/octet-stream")


@pytest.fixture
def samples() -> Path:
    if not (SAMPLES / "native.jsonl").exists():
        pytest.skip(f"the importer samples under {SAMPLES} are missing")
    return SAMPLES


@pytest.fixture
def make_set(user):
    """make_set(*problem_dicts, owner=user, name="set") -> ProblemSet (validation not queued)."""
    from webapp.problems.services import create_problem_set

    def make(*objects, owner=None, name="set"):
        ps, errors = create_problem_set(owner or user, name, upload_file(jsonl(*(objects or (GOOD, ECHO)))),
                                        validate=False)
        assert ps is not None, errors
        return ps
    return make


@pytest.fixture
def gz():
    return gzip.compress
