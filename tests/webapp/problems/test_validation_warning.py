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


def test_the_api_and_the_notification_carry_the_badge_the_pages_draw(client_alice, failing_set, monkeypatch):
    from webapp.problems import services

    listed = next(ps for ps in client_alice.get("/api/problem-sets").json() if ps["id"] == failing_set.pk)
    assert listed["validation"]["badge"] == {"state": "warning", "text": "1 failing"}
    assert listed["validation"]["in_progress"] is False
    assert listed["list_row"] == {"badge": {"state": "warning", "text": "1 failing"}, "text": "3 ok, 1 failing",
                                  "in_progress": False}
    sent = []
    monkeypatch.setattr(services, "notify_owner", lambda ps, payload: sent.append(payload))
    services.notify_validation(ProblemSet.objects.get(pk=failing_set.pk))
    assert sent[0]["badge"] == {"state": "warning", "text": "1 failing"}
    assert sent[0]["progress_text"] == "3 problems ok, 1 failing"
    assert sent[0]["list_row"] == listed["list_row"]


def test_a_running_validation_is_followed_with_the_servers_line(client_alice, user):
    from webapp.problems import services

    ps = make_problem_set(user, "running")
    ProblemSet.objects.filter(pk=ps.pk).update(validation_status="running", validation_checked=2, validation_passed=2)
    state = services.validation_state(ProblemSet.objects.get(pk=ps.pk))
    assert state["in_progress"] is True and state["badge"] == {"state": "running", "text": "running"}
    assert state["progress_text"] == "running the reference and empty solutions: 2 of 4 checked, 2 ok, 0 failing…"
    assert services.list_row(ProblemSet.objects.get(pk=ps.pk))["text"] == "2 of 4 checked"
