"""`manage.py load_demo`: creates, keeps and refreshes the demo set; never fails `make run`."""
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from webapp.problems.models import ProblemSet

from tests.factories import jsonl

from .conftest import ECHO, GOOD, WRONG

pytestmark = pytest.mark.django_db


def load_demo(*args) -> str:
    out = io.StringIO()
    call_command("load_demo", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def admin(db):
    return get_user_model().objects.create_superuser("admin", password="admin-password-1")


def test_load_demo_creates_the_set_then_leaves_it_unchanged_then_refreshes_it_in_place(admin, tmp_path):
    demo = tmp_path / "problems.jsonl"
    demo.write_bytes(jsonl(GOOD, ECHO))
    assert "created: 2 problems (1 train, 1 held-out)" in load_demo("--file", str(demo))
    ps = ProblemSet.objects.get(name="Demo problems")
    assert ps.owner == admin and ps.validation_status == "pending"
    assert "unchanged" in load_demo("--file", str(demo))
    demo.write_bytes(jsonl(GOOD, ECHO, WRONG))
    assert "refreshed: 3 problems" in load_demo("--file", str(demo))
    assert ProblemSet.objects.get().pk == ps.pk
    assert list(ps.problems.values_list("problem_id", flat=True)) == ["add", "echo-sum", "wrong-ref"]


def test_a_demo_file_with_excluded_problems_is_left_unchanged_and_the_users_exclusions_are_kept(admin, tmp_path):
    demo = tmp_path / "problems.jsonl"
    demo.write_bytes(jsonl({**GOOD, "excluded": True}, ECHO))
    assert "created" in load_demo("--file", str(demo))
    ps = ProblemSet.objects.get(name="Demo problems")
    assert list(ps.problems.values_list("problem_id", "excluded")) == [("add", True), ("echo-sum", False)]
    assert "unchanged" in load_demo("--file", str(demo))
    ps.problems.filter(problem_id="echo-sum").update(excluded=True)  # the user's own curation of the demo set
    assert "unchanged" in load_demo("--file", str(demo))
    assert list(ps.problems.values_list("excluded", flat=True)) == [True, True]


def test_load_demo_sync_validates_in_process(admin, tmp_path):
    demo = tmp_path / "problems.jsonl"
    demo.write_bytes(jsonl(GOOD, WRONG))
    assert "validation done" in load_demo("--file", str(demo), "--sync")
    ps = ProblemSet.objects.get()
    assert (ps.validation_passed, ps.validation_failed) == (1, 1)


def test_load_demo_without_the_file_says_so_and_succeeds(admin, tmp_path):
    assert "does not exist; no demo problem set loaded" in load_demo("--file", str(tmp_path / "missing.jsonl"))
    assert not ProblemSet.objects.exists()


def test_load_demo_without_a_superuser_says_so_and_succeeds(tmp_path):
    demo = tmp_path / "problems.jsonl"
    demo.write_bytes(jsonl(GOOD))
    assert "no superuser yet" in load_demo("--file", str(demo))
    assert not ProblemSet.objects.exists()


def test_the_real_demo_file_loads_without_errors(admin):
    from django.conf import settings

    if not (settings.BASE_DIR / "data" / "demo" / "problems.jsonl").exists():
        pytest.skip("data/demo/problems.jsonl is not there yet")
    load_demo()
    ps = ProblemSet.objects.get()
    assert ps.problem_count > 0 and ps.import_errors == [] and ps.heldout_count > 0
