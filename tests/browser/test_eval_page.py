"""An evaluation's page follows it without reloading: each evaluated problem appears in its table, and the
page settles on the final numbers when the evaluation ends, with the user's scroll and state kept."""
import os
import socket

from django.utils import timezone

from webapp.evals.models import EvalProblem, Evaluation

from .conftest import login, wait_until

ROWS = "document.querySelectorAll('#eval-problems tr[data-problem]').length"


def _problem(evaluation, position, problem_id, c):
    EvalProblem.objects.create(evaluation=evaluation, position=position, problem_id=problem_id, n=2, c=c,
                               pass_at_1=c / 2, pass_at_k={"2": 1.0 if c else 0.0})


def test_the_page_adds_each_evaluated_problem_and_the_final_numbers_in_place(page, live_server_url, user):
    now = timezone.now()
    evaluation = Evaluation.objects.create(  # held by a live worker: this test's own process, on this host
        owner=user, model="models/tiny", suite="humaneval", samples=2, ks=[1, 2], total=2, status="running",
        worker_host=socket.gethostname(), worker_pid=os.getpid(), heartbeat=now, started=now)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/evals/{evaluation.pk}")
    assert "No problem evaluated yet." in page.locator("#eval-problems").inner_text()
    assert page.locator("#cancel-eval").is_visible()
    page.evaluate("window.scrollTo(0, 40); window.sameDocument = true")

    _problem(evaluation, 0, "HumanEval/0", 1)
    Evaluation.objects.filter(pk=evaluation.pk).update(done=1)
    wait_until(page, f"{ROWS} === 1", 20)
    assert "1 of 2 problems evaluated" in page.locator("#eval-status").inner_text()
    assert page.locator("#eval-problems tr[data-problem='HumanEval/0']").inner_text().split("\t")[1:3] == [
        "1 / 2", "50.0%"]

    _problem(evaluation, 1, "HumanEval/1", 2)
    Evaluation.objects.filter(pk=evaluation.pk).update(done=2, status="done", pass_at_1=0.75, pass_at_k={"2": 1.0},
                                                       finished=timezone.now())
    wait_until(page, "document.getElementById('eval-pass1').textContent === '75.0%'", 20)
    assert page.evaluate(ROWS) == 2 and page.locator("#cancel-eval").count() == 0
    assert page.locator("#eval-status").inner_text().strip() == "done"
    assert page.evaluate("window.sameDocument") is True  # swapped in place, never reloaded
