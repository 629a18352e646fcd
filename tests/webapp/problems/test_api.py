"""`/api/problem-sets`: upload, list, detail shape, export, re-validate, delete, access."""
import json

import pytest
from django.test import Client

from webapp.accounts.models import ApiToken
from webapp.problems.models import ProblemSet
from webapp.problems.services import validate_problem_set

from tests.factories import jsonl

from .conftest import ECHO, GOOD, VACUOUS, upload_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def bearer(user):
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(user, 'test')[1]}"}


def test_upload_with_a_token_returns_201_with_the_count_and_the_bad_lines(client, bearer, user):
    content = jsonl(GOOD) + b"{oops\n" + jsonl(ECHO)
    response = client.post("/api/problem-sets", {"name": "api set", "format": "auto",
                                                 "file": upload_file(content)}, **bearer)
    assert response.status_code == 201, response.content
    body = response.json()
    ps = ProblemSet.objects.get()
    assert body["id"] == ps.pk and body["name"] == "api set" and body["problems"] == 2
    assert body["errors"] == [{"line": 2, "field": None, "message": body["errors"][0]["message"]}]
    assert "invalid JSON" in body["errors"][0]["message"]
    assert ps.owner == user and ps.validation_status == "pending"


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"not json at all\n", "invalid JSON"),
    (b'{"id": "a", "kind": "function"}\n', "entry_point"),
])
def test_a_useless_upload_answers_400_with_a_clear_json_message(client_alice, content, words):
    response = client_alice.post("/api/problem-sets", {"file": upload_file(content)})
    assert response.status_code == 400
    body = response.json()
    assert body["detail"].startswith("upload refused") and words in body["detail"]
    assert body["errors"] and not ProblemSet.objects.exists()


def test_an_upload_without_a_file_answers_400(client_alice):
    response = client_alice.post("/api/problem-sets", {"name": "nothing"})
    assert response.status_code == 400 and "multipart field `file`" in response.json()["detail"]


def test_an_oversized_upload_answers_400_naming_the_limit(client_alice, settings):
    settings.UPLOAD_MAX_BYTES = 1024 * 1024
    response = client_alice.post("/api/problem-sets", {"file": upload_file(jsonl(GOOD) + b" " * 2**21, "big.jsonl")})
    assert response.status_code == 400
    assert "larger than the upload limit of 1.0 MiB" in response.json()["detail"]


def test_a_gzip_upload_through_the_api_is_read(client_alice, gz):
    response = client_alice.post("/api/problem-sets", {"file": upload_file(gz(jsonl(GOOD, ECHO)), "x.jsonl.gz")})
    assert response.status_code == 201 and response.json()["problems"] == 2


def test_a_session_upload_without_csrf_token_is_refused(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post("/api/problem-sets", {"file": upload_file(jsonl(GOOD))})
    assert response.status_code == 403 and not ProblemSet.objects.exists()


def test_detail_has_the_documented_shape_with_per_problem_verdicts(client_alice, make_set):
    ps = validate_problem_set(make_set(GOOD, ECHO, VACUOUS).pk)
    body = client_alice.get(f"/api/problem-sets/{ps.pk}").json()
    assert {"id", "name", "problems", "splits", "validation"} <= body.keys()
    assert (body["id"], body["name"], body["problems"]) == (ps.pk, "set", 3)
    assert body["splits"] == {"train": 1, "heldout": 2}
    v = body["validation"]
    assert (v["status"], v["passed"], v["failed"]) == ("done", 2, 1)
    assert [(r["problem_id"], r["reference_passed"], r["empty_failed"]) for r in v["results"]] == [
        ("add", True, True), ("echo-sum", True, True), ("vacuous", True, False)]
    assert all(set(r) == {"problem_id", "reference_passed", "empty_failed", "detail",
                                "excluded"} for r in v["results"])
    light = client_alice.get(f"/api/problem-sets/{ps.pk}?results=false").json()
    assert light["validation"]["results"] == [] and light["validation"]["status"] == "done"


def test_list_shows_only_the_users_sets_and_staff_see_all(client, user, other_user, staff_user, make_set):
    mine = make_set(name="mine")
    theirs = make_set(owner=other_user, name="theirs")
    client.force_login(user)
    assert [s["id"] for s in client.get("/api/problem-sets").json()] == [mine.pk]
    client.force_login(staff_user)
    assert {s["id"] for s in client.get("/api/problem-sets").json()} == {mine.pk, theirs.pk}
    assert client.get(f"/api/problem-sets/{mine.pk}").status_code == 200


def test_another_users_set_answers_404_on_every_endpoint(client, other_user, make_set):
    ps = make_set()
    client.force_login(other_user)
    assert client.get(f"/api/problem-sets/{ps.pk}").status_code == 404
    assert client.get(f"/api/problem-sets/{ps.pk}/export").status_code == 404
    assert client.post(f"/api/problem-sets/{ps.pk}/validate").status_code == 404
    assert client.delete(f"/api/problem-sets/{ps.pk}").status_code == 404
    assert ProblemSet.objects.filter(pk=ps.pk).exists()


def test_anonymous_api_calls_answer_401(client, make_set):
    ps = make_set()
    assert client.get("/api/problem-sets").status_code == 401
    assert client.get(f"/api/problem-sets/{ps.pk}").status_code == 401
    assert client.post("/api/problem-sets", {"file": upload_file(jsonl(GOOD))}).status_code == 401


def test_delete_answers_409_while_a_run_uses_the_set_then_204(client_alice, user, make_set):
    from webapp.runs.models import Run

    ps = make_set()
    run = Run.objects.create(owner=user, name="training", problem_set=ps, status="queued")
    response = client_alice.delete(f"/api/problem-sets/{ps.pk}")
    assert response.status_code == 409
    assert "used by 1 active run" in response.json()["detail"] and "training (queued)" in response.json()["detail"]
    Run.objects.filter(pk=run.pk).update(status="cancelled")
    assert client_alice.delete(f"/api/problem-sets/{ps.pk}").status_code == 204
    assert not ProblemSet.objects.exists()


def test_export_through_the_api_is_native_jsonl(client_alice, make_set):
    ps = make_set(GOOD, ECHO)
    response = client_alice.get(f"/api/problem-sets/{ps.pk}/export")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-ndjson")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [json.loads(line) for line in lines] == [p.data for p in ps.problems.order_by("position")]


def test_revalidate_through_the_api_answers_202_pending(client_alice, make_set):
    ps = validate_problem_set(make_set().pk)
    response = client_alice.post(f"/api/problem-sets/{ps.pk}/validate")
    assert response.status_code == 202 and response.json()["validation"]["status"] == "pending"


def test_the_openapi_schema_lists_the_problem_set_endpoints(client):
    paths = client.get("/api/openapi.json").json()["paths"]
    assert {"/api/problem-sets", "/api/problem-sets/{problem_set_id}"} <= paths.keys()
    assert {"get", "post"} <= paths["/api/problem-sets"].keys()
    assert {"get", "delete"} <= paths["/api/problem-sets/{problem_set_id}"].keys()


def test_with_the_limit_handler_installed_globally_an_oversized_api_upload_stops_early(client_alice, settings):
    settings.UPLOAD_MAX_BYTES = 1024 * 1024
    settings.FILE_UPLOAD_HANDLERS = ["webapp.problems.uploads.UploadLimitHandler",
                                     "django.core.files.uploadhandler.MemoryFileUploadHandler",
                                     "django.core.files.uploadhandler.TemporaryFileUploadHandler"]
    response = client_alice.post("/api/problem-sets", {"file": upload_file(jsonl(GOOD) + b" " * 2**21)})
    assert response.status_code == 400
    assert "the file is larger than the upload limit of 1.0 MiB" in response.json()["detail"]
    assert not ProblemSet.objects.exists()
