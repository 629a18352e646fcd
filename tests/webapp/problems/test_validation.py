"""Validation: reference must pass, empty must fail; idempotent tasks; notifications; a real worker."""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from webapp.problems.models import ProblemSet
from webapp.problems.services import create_problem_set, enqueue_validation, validate_problem_set

from tests.factories import jsonl
from tests.webapp.conftest import wait_for

from .conftest import ECHO, GOOD, VACUOUS, WRONG, upload_file


def verdicts(ps):
    return {p.problem_id: (p.validation.reference_passed, p.validation.empty_failed)
            for p in ps.problems.select_related("validation")}


@pytest.mark.django_db
def test_validation_passes_good_references_and_flags_wrong_references_and_vacuous_tests(make_set):
    ps = make_set(GOOD, ECHO, WRONG, VACUOUS)
    ps = validate_problem_set(ps.pk)
    assert ps.validation_status == "done"
    assert verdicts(ps) == {"add": (True, True), "echo-sum": (True, True), "wrong-ref": (False, True),
                            "vacuous": (True, False)}
    assert (ps.validation_passed, ps.validation_failed) == (2, 2)
    wrong = ps.problems.get(problem_id="wrong-ref").validation
    assert wrong.reference_result["status"] == "failed"
    assert "reference solution: failed (0/1 tests passed)" in wrong.detail
    assert "empty solution passes every test" in ps.problems.get(problem_id="vacuous").validation.detail
    good = ps.problems.get(problem_id="add").validation
    assert good.reference_result["tests_passed"] == good.reference_result["tests_total"] == 2
    assert good.empty_result["status"] != "passed"


@pytest.mark.django_db
def test_a_redelivered_task_for_a_finished_set_is_a_no_op_unless_forced(make_set):
    ps = validate_problem_set(make_set(GOOD).pk)
    finished = ps.validation_finished
    again = validate_problem_set(ps.pk, ps.validation_generation)
    assert again.validation_finished == finished
    forced = validate_problem_set(ps.pk, ps.validation_generation, force=True)
    assert forced.validation_finished > finished
    assert forced.problems.get().validation.reference_passed  # results overwritten, not duplicated


@pytest.mark.django_db
def test_a_task_for_a_superseded_validation_request_stands_down(make_set):
    ps = make_set(GOOD)
    old_generation = enqueue_validation(ps).validation_generation
    enqueue_validation(ps)  # the user asked again before the first task ran
    stale = validate_problem_set(ps.pk, old_generation)
    assert stale.validation_status == "pending"
    assert not hasattr(stale.problems.get(), "validation")


@pytest.mark.django_db
def test_a_broken_sandbox_marks_the_validation_failed_with_the_reason(make_set, settings):
    settings.SANDBOX_BACKEND = "no-such-backend"
    ps = validate_problem_set(make_set(GOOD).pk)
    assert ps.validation_status == "failed"
    assert "no-such-backend" in ps.validation_error


@pytest.mark.django_db
def test_validation_for_a_deleted_set_does_nothing(make_set):
    ps = make_set(GOOD)
    ps.delete()
    assert validate_problem_set(ps.pk) is None


@pytest.mark.django_db(transaction=True)
def test_finishing_a_validation_notifies_the_owner_group(user, make_set):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(f"user-{user.pk}", channel)
    try:
        ps = validate_problem_set(make_set(GOOD).pk)
        statuses = []
        while "done" not in statuses:
            message = async_to_sync(layer.receive)(channel)
            assert message["type"] == "notify"
            assert message["payload"]["event"] == "validation"
            assert message["payload"]["problem_set"] == ps.pk
            statuses.append(message["payload"]["status"])
        assert [s for i, s in enumerate(statuses) if i == 0 or statuses[i - 1] != s] == ["running", "done"]
    finally:
        async_to_sync(layer.group_discard)(f"user-{user.pk}", channel)


@pytest.mark.django_db
def test_a_running_validation_stores_its_progress_as_it_goes(make_set, settings, monkeypatch, client, user):
    from webapp.problems import services

    settings.SANDBOX_VALIDATION_CHUNK = 1
    ps = make_set(GOOD, ECHO, WRONG, VACUOUS)
    seen = []

    def record(problem_set):  # what the page and the API would show at each notification
        row = ProblemSet.objects.get(pk=problem_set.pk)
        seen.append((row.validation_status, row.validation_checked, row.validation_passed, row.validation_failed,
                     row.problems.filter(validation__isnull=False).count()))
        if row.validation_status == "running" and row.validation_checked == 2:
            client.force_login(user)
            body = client.get(f"/api/problem-sets/{ps.pk}").json()["validation"]
            seen.append(("api", body["checked"], body["total"], body["passed"], len(body["results"])))
            page = client.get(f"/problem-sets/{ps.pk}/").content.decode()
            seen.append(("page", "2 of 4 checked" in page))
    monkeypatch.setattr(services, "notify_validation", record)

    validate_problem_set(ps.pk)
    assert seen == [("running", 0, 0, 0, 0), ("running", 1, 1, 0, 1), ("running", 2, 2, 0, 2),
                    ("api", 2, 4, 2, 2), ("page", True), ("running", 3, 2, 1, 3), ("running", 4, 2, 2, 4),
                    ("done", 4, 2, 2, 4)]


@pytest.mark.e2e
def test_an_upload_is_validated_by_a_real_celery_worker(user, celery_worker):
    ps, errors = create_problem_set(user, "e2e", upload_file(jsonl(GOOD, ECHO, VACUOUS)))
    assert errors == []
    wait_for(lambda: ps.refresh_from_db() or ps.validation_status in ("done", "failed"), 120, "validation finished",
             interval=0.2)
    assert ps.validation_status == "done", ps.validation_error
    assert verdicts(ps) == {"add": (True, True), "echo-sum": (True, True), "vacuous": (True, False)}
    assert ProblemSet.objects.get(pk=ps.pk).validation_passed == 2
