"""Problem-set pages: upload form, errors, CSRF, detail with search, one problem, export, access."""
import pytest
from django.test import Client

from sandbox.formats import load_problems_bytes
from webapp.problems.models import ProblemSet
from webapp.problems.services import validate_problem_set

from tests.factories import jsonl

from .conftest import ECHO, GOOD, WRONG, upload_file

pytestmark = pytest.mark.django_db


def test_the_upload_form_creates_a_set_and_redirects_to_its_page(client_alice, user):
    response = client_alice.post("/problem-sets/", {"name": "Mine", "format": "auto",
                                                     "file": upload_file(jsonl(GOOD, ECHO))})
    ps = ProblemSet.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/problem-sets/{ps.pk}/"
    assert ps.owner == user and ps.name == "Mine" and ps.problem_count == 2
    page = client_alice.get(response["Location"])
    assert "Imported 2 problems" in page.content.decode()
    assert 'href="/runs/new?problem_set=%d"' % ps.pk in page.content.decode()


def test_bad_lines_of_an_upload_are_listed_with_line_and_field_on_the_set_page(client_alice):
    content = jsonl(GOOD) + jsonl({"id": "x", "kind": "function", "tests": ["assert f()"]})
    response = client_alice.post("/problem-sets/", {"format": "native", "file": upload_file(content)}, follow=True)
    html = response.content.decode()
    assert "1 lines were refused" in html
    assert "<td>2</td>" in html and "<code>entry_point</code>" in html and "is required for kind function" in html


def test_an_upload_with_no_good_problem_is_refused_on_the_form_with_its_errors(client_alice):
    response = client_alice.post("/problem-sets/", {"format": "auto", "file": upload_file(b"[1, 2]\n{bad\n")})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Upload refused" in html and "<td>1</td>" in html and "<td>2</td>" in html and "invalid JSON" in html
    assert not ProblemSet.objects.exists()


def test_an_oversized_upload_through_the_form_is_refused_with_the_limit(client_alice, settings):
    settings.UPLOAD_MAX_BYTES = 1024 * 1024
    content = jsonl(GOOD) + b" " * (2 * 1024 * 1024)
    response = client_alice.post("/problem-sets/", {"format": "auto", "file": upload_file(content)})
    assert response.status_code == 413
    assert "larger than the upload limit of 1.0 MiB" in response.content.decode()
    assert not ProblemSet.objects.exists()


def test_the_upload_form_enforces_csrf_for_session_clients(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    refused = client.post("/problem-sets/", {"format": "auto", "file": upload_file(jsonl(GOOD))})
    assert refused.status_code == 403 and not ProblemSet.objects.exists()
    token = client.get("/problem-sets/").context["csrf_token"]
    accepted = client.post("/problem-sets/", {"format": "auto", "file": upload_file(jsonl(GOOD)),
                                              "csrfmiddlewaretoken": str(token)})
    assert accepted.status_code == 302 and ProblemSet.objects.count() == 1


def test_delete_and_validate_forms_enforce_csrf(user, make_set):
    ps = make_set()
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(f"/problem-sets/{ps.pk}/delete").status_code == 403
    assert client.post(f"/problem-sets/{ps.pk}/validate").status_code == 403
    assert ProblemSet.objects.filter(pk=ps.pk).exists()


def test_the_set_page_searches_problems_and_filters_by_split_and_verdict(client_alice, make_set):
    ps = validate_problem_set(make_set(GOOD, ECHO, WRONG).pk)
    url = f"/problem-sets/{ps.pk}/"

    def shown(**params):
        return [p.problem_id for p in client_alice.get(url, params).context["page"]]

    assert shown() == ["add", "echo-sum", "wrong-ref"]
    assert shown(q="ECHO") == ["echo-sum"]                 # problem id, case-insensitive
    assert shown(q="integers and print") == ["echo-sum"]   # prompt
    assert shown(q="math") == ["add"]                      # tags
    assert shown(split="heldout") == ["echo-sum"]
    assert shown(verdict="failing") == ["wrong-ref"]
    assert shown(verdict="passing", split="train") == ["add"]
    html = client_alice.get(url).content.decode()
    assert "2 problems ok, 1 failing" in html


def test_the_set_page_paginates(client_alice, make_set):
    ps = make_set(*[dict(GOOD, id=f"p{i:03}") for i in range(120)])
    page = client_alice.get(f"/problem-sets/{ps.pk}/", {"q": "p", "page": 3}).context["page"]
    assert [p.problem_id for p in page] == [f"p{i:03}" for i in range(100, 120)]
    assert "page 3 of 3" in client_alice.get(f"/problem-sets/{ps.pk}/?page=3").content.decode()


def test_a_pending_set_page_loads_the_script_that_follows_validation(client_alice, make_set):
    html = client_alice.get(f"/problem-sets/{make_set().pk}/").content.decode()
    assert 'data-status="pending"' in html and "js/problem_set.js" in html


def test_the_problem_page_shows_prompt_tests_highlighted_reference_and_validation_output(client_alice, make_set):
    ps = validate_problem_set(make_set(GOOD, WRONG).pk)
    wrong = ps.problems.get(problem_id="wrong-ref")
    html = client_alice.get(f"/problem-sets/{ps.pk}/problems/{wrong.pk}/").content.decode()
    assert "def sub(a, b):" in html                              # prompt
    assert "assert" in html and "sub" in html                    # tests
    assert '<span style="color: #66D9EF">def</span>' in html    # Pygments, highlighted server-side
    assert "reference solution: failed (0/1 tests passed)" in html
    assert "AssertionError" in html or "assert" in html
    echo_free = client_alice.get(f"/problem-sets/{ps.pk}/problems/{ps.problems.get(problem_id='add').pk}/")
    assert echo_free.status_code == 200 and "fails (good)" in echo_free.content.decode()


def test_the_problem_page_of_a_stdio_problem_lists_its_cases(client_alice, make_set):
    ps = make_set(ECHO)
    html = client_alice.get(f"/problem-sets/{ps.pk}/problems/{ps.problems.get().pk}/").content.decode()
    assert "Test cases (2)" in html and "<pre>5 5\n</pre>" in html and "Not validated yet" in html


def test_export_round_trips_the_problems_as_native_jsonl(client_alice, make_set, samples):
    for fmt in ("humaneval", "apps", "native"):
        original = load_problems_bytes((samples / f"{fmt}.jsonl").read_bytes(), f"{fmt}.jsonl")
        client_alice.post("/problem-sets/", {"name": f"my {fmt}", "format": "auto",
                                             "file": upload_file((samples / f"{fmt}.jsonl").read_bytes())})
        ps = ProblemSet.objects.get(name=f"my {fmt}")
        response = client_alice.get(f"/problem-sets/{ps.pk}/export.jsonl")
        assert response.status_code == 200
        assert response["Content-Disposition"] == f'attachment; filename="my-{fmt}.jsonl"'
        back = load_problems_bytes(b"".join(response.streaming_content), "export.jsonl", "native")
        assert back.errors == [] and back.format == "native"
        assert back.problems == original.problems


def test_another_user_gets_404_on_every_page_of_a_set(client, other_user, make_set):
    ps = make_set(name="alice-private-set")
    problem = ps.problems.first()
    client.force_login(other_user)
    for url in (f"/problem-sets/{ps.pk}/", f"/problem-sets/{ps.pk}/problems/{problem.pk}/",
                f"/problem-sets/{ps.pk}/export.jsonl"):
        assert client.get(url).status_code == 404, url
    for url in (f"/problem-sets/{ps.pk}/delete", f"/problem-sets/{ps.pk}/validate"):
        assert client.post(url).status_code == 404, url
    assert ProblemSet.objects.filter(pk=ps.pk).exists()
    assert list(client.get("/problem-sets/").context["problem_sets"]) == []
    assert "alice-private-set" not in client.get("/problem-sets/").content.decode()


def test_staff_see_every_set_and_its_owner(client, staff_user, make_set):
    ps = make_set(name="alice's set")
    client.force_login(staff_user)
    html = client.get("/problem-sets/").content.decode()
    assert "alice&#x27;s set" in html and "<td>alice</td>" in html
    assert client.get(f"/problem-sets/{ps.pk}/").status_code == 200


def test_delete_is_refused_while_a_run_uses_the_set_and_allowed_after(client_alice, make_set, user):
    from webapp.runs.models import Run

    ps = make_set()
    run = Run.objects.create(owner=user, name="busy", problem_set=ps, status="running")
    response = client_alice.post(f"/problem-sets/{ps.pk}/delete", follow=True)
    assert "Not deleted" in response.content.decode() and "busy (running)" in response.content.decode()
    assert ProblemSet.objects.filter(pk=ps.pk).exists()
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    response = client_alice.post(f"/problem-sets/{ps.pk}/delete")
    assert response.status_code == 302 and response["Location"] == "/problem-sets/"
    assert not ProblemSet.objects.filter(pk=ps.pk).exists()
    run.refresh_from_db()
    assert run.problem_set is None


def test_validate_again_queues_a_new_validation(client_alice, make_set, django_capture_on_commit_callbacks):
    ps = validate_problem_set(make_set().pk)
    assert ps.validation_status == "done"
    generation = ps.validation_generation
    with django_capture_on_commit_callbacks() as callbacks:
        response = client_alice.post(f"/problem-sets/{ps.pk}/validate")
    assert response.status_code == 302 and len(callbacks) == 1
    ps.refresh_from_db()
    assert ps.validation_status == "pending" and ps.validation_generation == generation + 1


def test_the_list_shows_how_far_an_import_and_a_validation_got(client_alice, make_set, settings, tmp_path):
    settings.UPLOAD_INLINE_BYTES = 64
    settings.MEDIA_ROOT = tmp_path
    client_alice.post("/api/problem-sets", {"name": "big", "file": upload_file(jsonl(GOOD, ECHO, WRONG))})
    ProblemSet.objects.filter(name="big").update(import_lines=2000, import_read_bytes=3 << 20,
                                                 import_total_bytes=12 << 20)
    running = make_set(GOOD, ECHO, WRONG, name="running")
    ProblemSet.objects.filter(pk=running.pk).update(validation_status="running", validation_checked=2)
    html = client_alice.get("/problem-sets/").content.decode()
    assert 'data-import="importing"' in html
    assert "importing: 2000 lines, 3.0\xa0MB of 12.0\xa0MB read" in html
    assert "2 of 3 checked" in html
    assert "js/problem_sets.js" in html
