"""The candidate inspector explains a zero efficiency on a failing candidate instead of leaving it a puzzle."""
from tests.factories import ingest, problem_event


def _with_every_dimension(event):
    for c in event["candidates"]:
        passed = c["result"]["status"] == "passed"
        c["rewards"] = {"pass_rate": 1.0 if passed else 0.5, "syntax": 1.0, "efficiency": 0.9 if passed else 0.0,
                        "conciseness": 1.0, "format": 1.0}
    return event


def test_a_failing_candidates_zero_efficiency_says_it_is_by_design(client_alice, run):
    ingest(run, [_with_every_dimension(problem_event(1))])
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?status=failed").content.decode()
    dims = html.split('<span data-dimension="efficiency">')[1].split("</span></span>")[0]
    assert "0.000" in dims and "0 by design: only a candidate that passes every test earns efficiency" in dims


def test_a_passing_candidate_has_no_note(client_alice, run):
    ingest(run, [_with_every_dimension(problem_event(1))])
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?status=passed").content.decode()
    assert 'data-dimension="efficiency"' in html and "by design" not in html
