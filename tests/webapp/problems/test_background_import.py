"""Large uploads: stored by the web process, imported by a sandbox worker with progress, then validated."""
import gzip
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from webapp.problems import services
from webapp.problems.models import ProblemSet
from webapp.problems.services import import_problem_set

from tests.factories import jsonl
from tests.webapp.conftest import wait_for

from .conftest import ECHO, GOOD, upload_file

INLINE = 16 * 1024


def many(n: int, **overrides) -> bytes:
    """`n` distinct copies of GOOD, one per line (about 300 bytes each)."""
    return jsonl(*({**GOOD, "id": f"add-{i}", **overrides} for i in range(n)))


@pytest.fixture
def inline_16k(settings, tmp_path):
    settings.UPLOAD_INLINE_BYTES = INLINE
    settings.MEDIA_ROOT = tmp_path / "uploads"


def stored(ps: ProblemSet) -> Path:
    return Path(django_settings.MEDIA_ROOT) / ps.upload_path


@pytest.mark.django_db
def test_a_small_upload_is_still_imported_in_the_request_and_answers_201(client_alice, inline_16k):
    response = client_alice.post("/api/problem-sets", {"file": upload_file(jsonl(GOOD, ECHO))})
    assert response.status_code == 201
    body = response.json()
    assert body["problems"] == 2 and body["import"]["status"] == "done" and body["import"]["problems"] == 2
    assert not services.upload_dir(body["id"]).exists()


@pytest.mark.django_db
def test_a_large_api_upload_answers_202_and_is_parsed_by_the_import_task(
        client_alice, inline_16k, django_capture_on_commit_callbacks, monkeypatch):
    published = []
    monkeypatch.setattr(services, "publish_import", published.append)
    content = many(100)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_alice.post("/api/problem-sets", {"name": "big", "file": upload_file(content)})
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["problems"] is None and body["errors"] == []
    assert body["import"] == {"status": "importing", "read_bytes": 0, "total_bytes": len(content), "lines": 0,
                              "problems": None}
    ps = ProblemSet.objects.get()
    assert published == [ps.pk] and ps.problems.count() == 0
    assert stored(ps).read_bytes() == content  # the web process only stored it

    with django_capture_on_commit_callbacks(execute=True):
        ps = import_problem_set(ps.pk)
    assert (ps.import_status, ps.problem_count, ps.format) == ("done", 100, "native")
    assert ps.validation_status == "pending" and ps.validation_generation == 1  # validation queued
    assert not services.upload_dir(ps.pk).exists()
    detail = client_alice.get(f"/api/problem-sets/{ps.pk}").json()
    assert detail["import"] == {"status": "done", "read_bytes": len(content), "total_bytes": len(content),
                                "lines": detail["import"]["lines"], "problems": 100, "errors": [],
                                "in_progress": False, "progress_text": ""}
    assert import_problem_set(ps.pk).problem_count == 100  # a redelivered task changes nothing


@pytest.mark.django_db
def test_a_small_gzip_whose_text_passes_the_inline_budget_is_imported_in_the_background(
        client_alice, inline_16k, django_capture_on_commit_callbacks):
    content = gzip.compress(many(200))
    assert len(content) < INLINE
    with django_capture_on_commit_callbacks(execute=False):
        response = client_alice.post("/api/problem-sets", {"file": upload_file(content, "p.jsonl.gz")})
    assert response.status_code == 202
    ps = import_problem_set(response.json()["id"])
    assert ps.import_status == "done" and ps.problem_count == 200


@pytest.mark.django_db
def test_the_upload_form_sends_a_large_upload_to_the_set_page_which_shows_its_progress(client_alice, inline_16k):
    response = client_alice.post("/problem-sets/", {"format": "auto", "file": upload_file(many(100))}, follow=True)
    ps = ProblemSet.objects.get()
    assert response.redirect_chain == [(f"/problem-sets/{ps.pk}/", 302)]
    html = response.content.decode()
    assert "a sandbox worker imports it" in html
    assert 'id="import" data-problem-set="%d" data-status="importing"' % ps.pk in html
    assert "<progress" in html and "starts when the import is done" in html
    assert "Validate again" not in html


@pytest.mark.django_db
def test_import_progress_is_stored_and_shown_while_the_worker_reads(client_alice, user, inline_16k, monkeypatch):
    monkeypatch.setattr(services, "IMPORT_PROGRESS_INTERVAL_S", 0)
    content = many(2500)
    response = client_alice.post("/api/problem-sets", {"file": upload_file(content)})
    ps_id = response.json()["id"]
    seen = []

    def record(ps):  # what the API and the page show at each notification
        state = client_alice.get(f"/api/problem-sets/{ps_id}?results=false").json()["import"]
        seen.append((state["status"], state["lines"], state["read_bytes"], state["total_bytes"]))
        if state["status"] == "importing":
            page = client_alice.get(f"/problem-sets/{ps_id}/").content.decode()
            assert f'{state["lines"]} lines' in page
    monkeypatch.setattr(services, "notify_import", record)

    import_problem_set(ps_id)
    assert [s[:2] for s in seen] == [("importing", 1000), ("importing", 2000), ("importing", 2500), ("done", 2500)]
    assert all(0 < read <= total == len(content) for _, _, read, total in seen)
    assert seen[-1][2] == len(content)


@pytest.mark.django_db
def test_a_failed_import_keeps_nothing_and_the_set_page_lists_its_errors_by_line_and_field(
        client_alice, inline_16k, make_set, django_capture_on_commit_callbacks):
    kept = make_set(GOOD, ECHO, name="kept")
    bad = many(100, entry_point=None)  # every line lacks its entry point
    response = client_alice.post("/api/problem-sets", {"file": upload_file(bad)})
    assert response.status_code == 202
    with django_capture_on_commit_callbacks(execute=True):
        ps = import_problem_set(response.json()["id"])
    assert ps.import_status == "failed" and ps.problem_count == 0 and ps.validation_status == "failed"
    assert ps.import_errors[0]["line"] == 1 and ps.import_errors[0]["field"] == "entry_point"
    assert not services.upload_dir(ps.pk).exists()
    html = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert "The import failed" in html and "<td>2</td>" in html and "<code>entry_point</code>" in html
    assert "Validate again" not in html
    detail = client_alice.get(f"/api/problem-sets/{ps.pk}").json()["import"]
    assert detail["status"] == "failed" and detail["errors"][0]["field"] == "entry_point"
    assert client_alice.post(f"/api/problem-sets/{ps.pk}/validate").status_code == 409
    kept.refresh_from_db()
    assert kept.problem_count == 2 and kept.import_status == "done"  # other sets are untouched


@pytest.mark.django_db
def test_a_gzip_bomb_costs_the_request_only_the_inline_budget_and_fails_in_the_worker(
        client_alice, inline_16k, settings):
    settings.UPLOAD_MAX_EXPANDED_BYTES = 8 << 20
    bomb = gzip.compress(b" " * (64 << 20))
    response = client_alice.post("/api/problem-sets", {"file": upload_file(bomb, "bomb.jsonl.gz")})
    assert response.status_code == 202
    ps = import_problem_set(response.json()["id"])
    assert ps.import_status == "failed"
    assert "decompresses to more than 8 MiB" in ps.import_errors[0]["message"]
    assert "CRUCIBLE_UPLOAD_MAX_EXPANDED_MB" in ps.import_errors[0]["message"]


@pytest.mark.django_db
def test_deleting_a_set_while_it_imports_removes_its_upload_and_the_task_stands_down(
        client_alice, inline_16k, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        ps_id = client_alice.post("/api/problem-sets", {"file": upload_file(many(100))}).json()["id"]
    assert services.upload_dir(ps_id).exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert client_alice.delete(f"/api/problem-sets/{ps_id}").status_code == 204
    assert not services.upload_dir(ps_id).exists()
    assert import_problem_set(ps_id) is None


@pytest.mark.django_db
def test_the_sweep_publishes_again_an_import_the_broker_lost_but_not_one_it_holds(
        client_alice, inline_16k, monkeypatch, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        lost = client_alice.post("/api/problem-sets", {"file": upload_file(many(100))}).json()["id"]
        held = client_alice.post("/api/problem-sets", {"file": upload_file(many(101))}).json()["id"]
    published = []
    monkeypatch.setattr("webapp.core.broker.held_task_ids", lambda queue: {services.import_task_id(held)})
    monkeypatch.setattr("webapp.core.broker.publish", lambda name, args, task_id: published.append(task_id) or True)
    assert services.IMPORT_JOB.republish_lost() == [lost]
    assert published == [services.import_task_id(lost)]
    assert services.VALIDATION_JOB.republish_lost() == []  # nothing to validate before the import


@pytest.mark.e2e
def test_a_large_upload_is_imported_then_validated_by_a_real_celery_worker(client, user, celery_worker, settings):
    settings.UPLOAD_INLINE_BYTES = 64
    client.force_login(user)
    response = client.post("/api/problem-sets", {"file": upload_file(jsonl(GOOD, ECHO))})
    assert response.status_code == 202, response.content
    ps = ProblemSet.objects.get(pk=response.json()["id"])
    wait_for(lambda: ps.refresh_from_db() or ps.validation_status in ("done", "failed"), 120, "validation finished",
             interval=0.2)
    assert ps.import_status == "done" and ps.problem_count == 2
    assert ps.validation_status == "done" and ps.validation_passed == 2, ps.validation_error
    assert not services.upload_dir(ps.pk).exists()


@pytest.mark.django_db
def test_a_held_out_share_chosen_at_upload_is_applied_by_the_import_task(
        client_alice, inline_16k, django_capture_on_commit_callbacks, monkeypatch):
    from webapp.problems.curation import heldout_ids

    monkeypatch.setattr(services, "publish_import", lambda pk: None)
    response = client_alice.post("/api/problem-sets", {"file": upload_file(many(100, split="train")),
                                                       "heldout_share": "0.1", "heldout_seed": "5"})
    assert response.status_code == 202 and response.json()["heldout_share"] == 0.1
    ps = import_problem_set(ProblemSet.objects.get().pk)
    assert (ps.train_count, ps.heldout_count) == (90, 10)
    chosen = set(ps.problems.filter(split="heldout").values_list("problem_id", flat=True))
    assert chosen == heldout_ids((f"add-{i}" for i in range(100)), 0.1, 5)
