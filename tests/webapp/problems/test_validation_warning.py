"""A set whose validation found failing problems shows a warning, never a green "done", on every page."""
import pytest

from webapp.problems.models import ProblemSet

from tests.factories import make_problem_set


@pytest.fixture
def failing_set(user):
    ps = make_problem_set(user, "one bad reference")
    ProblemSet.objects.filter(pk=ps.pk).update(validation_status="done", validation_passed=3, validation_failed=1)
    return ps


@pytest.mark.parametrize("url", ["/", "/problem-sets/", "/problem-sets/{pk}/"])
def test_a_set_with_failing_problems_is_badged_as_a_warning(client_alice, failing_set, url):
    html = client_alice.get(url.format(pk=failing_set.pk)).content.decode()
    assert '<span class="status status-warning" data-validation-status>1 failing</span>' in html
    assert "status-done" not in html


def test_the_set_page_says_what_failing_problems_mean_for_a_run(client_alice, failing_set):
    html = client_alice.get(f"/problem-sets/{failing_set.pk}/").content.decode()
    assert 'id="validation-warning"' in html and "1 problem failed validation" in html


def test_the_run_form_marks_the_set(client_alice, failing_set):
    assert "⚠ 1 failing validation" in client_alice.get("/runs/new").content.decode()


def test_a_clean_set_stays_done(client_alice, user):
    ps = make_problem_set(user, "clean")
    ProblemSet.objects.filter(pk=ps.pk).update(validation_status="done", validation_passed=4)
    html = client_alice.get("/problem-sets/").content.decode()
    assert '<span class="status status-done" data-validation-status>done</span>' in html
