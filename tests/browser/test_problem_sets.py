"""A user uploads a problem set in the browser and watches its validation finish (real worker)."""
import json

import pytest

from .conftest import login

PROBLEMS = [
    {"id": "add", "kind": "function", "prompt": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "entry_point": "add",
     "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
     "reference_solution": "def add(a, b):\n    return a + b\n", "split": "train", "tags": ["math"]},
    {"id": "echo-sum", "kind": "stdio", "prompt": "Read two integers and print their sum.",
     "test_cases": [{"input": "1 2\n", "output": "3\n"}],
     "reference_solution": "a, b = map(int, input().split())\nprint(a + b)\n", "split": "heldout"},
    {"id": "vacuous", "kind": "function", "prompt": "def noop():\n    pass\n", "entry_point": "noop",
     "tests": ["assert True"], "reference_solution": "def noop():\n    return None\n", "split": "heldout"},
]


def test_a_user_uploads_a_problem_set_and_sees_its_validation_finish(page, live_server_url, celery_worker, user,
                                                                   output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/")
    content = ("".join(json.dumps(p) + "\n" for p in PROBLEMS) + "{not json\n").encode()
    page.fill("input[name=name]", "Browser set")
    page.set_input_files("input[name=file]", files=[{"name": "browser.jsonl", "mimeType": "application/x-ndjson",
                                                     "buffer": content}])
    page.click("#upload-form button[type=submit]")
    page.wait_for_url("**/problem-sets/*/")
    assert page.locator("h1").inner_text() == "Browser set"
    assert "3 problems" in page.locator(".messages").inner_text()
    assert "invalid JSON" in page.locator("table.import-errors").inner_text()

    # The page follows the job (websocket / polling) and reloads itself when it is done.
    page.wait_for_selector("#validation[data-status=done]", timeout=120_000)
    assert "2 problems ok, 1 failing" in page.locator("#validation").inner_text()
    badge = page.locator("#validation [data-validation-status]")
    assert badge.inner_text() == "1 failing" and "status-warning" in badge.get_attribute("class")
    rows = page.locator("#problems tbody tr")
    assert rows.count() == 3
    assert "passes (bad)" in rows.nth(2).inner_text()
    page.screenshot(path=str(output_dir / "problem-set-validated.png"), full_page=True)

    page.click("text=add")
    page.wait_for_url("**/problems/*/")
    assert "Reference run" in page.content()
    page.screenshot(path=str(output_dir / "problem-detail.png"), full_page=True)


def test_the_problem_set_list_follows_a_validation_without_reload(page, live_server_url, celery_worker, user):
    import io

    from webapp.problems import services

    content = "".join(json.dumps(p) + "\n" for p in PROBLEMS[:2]).encode()
    ps, errors = services.create_problem_set(user, "Listed set", io.BytesIO(content), validate=False)
    assert ps is not None and not errors
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/")
    row = page.locator(f"#problem-sets tr[data-problem-set='{ps.pk}']")
    assert row.get_attribute("data-status") == "pending"
    page.evaluate("window.__sameDocument = true")

    services.enqueue_validation(ps)  # the worker picks it up while the list is open
    page.wait_for_selector(f"#problem-sets tr[data-problem-set='{ps.pk}'][data-status=done]", timeout=120_000)
    assert "2 ok, 0 failing" in row.inner_text()
    assert page.evaluate("window.__sameDocument") is True  # updated in place, not reloaded


def test_a_large_upload_is_imported_in_the_background_and_the_set_page_follows_it(
        page, background_imports, live_server_url, celery_worker, user):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/")
    content = "".join(json.dumps(p) + "\n" for p in PROBLEMS).encode()
    page.fill("input[name=name]", "Background set")
    page.set_input_files("input[name=file]", files=[{"name": "big.jsonl", "mimeType": "application/x-ndjson",
                                                     "buffer": content}])
    page.click("#upload-form button[type=submit]")
    page.wait_for_url("**/problem-sets/*/")
    # The import ends (the page reloads with the problems), then the page follows their validation.
    page.wait_for_selector("#import[data-status=done]", timeout=120_000)
    page.wait_for_selector("#validation[data-status=done]", timeout=120_000)
    assert "2 problems ok, 1 failing" in page.locator("#validation").inner_text()
    assert page.locator("#problems tbody tr").count() == 3
    from webapp.problems.models import ProblemSet

    assert ProblemSet.objects.get(name="Background set").import_total_bytes == len(content)  # it was stored


@pytest.mark.parametrize("filename, data, words", [("empty.jsonl", b"", "empty.jsonl is empty"),
                                                    ("blank.jsonl", b"\n\n", "file has no problems"),
                                                    ("notes.txt", b"hi\n", ".txt is not a problem file")])
def test_every_refused_file_is_explained_in_the_same_place(page, live_server_url, user, output_dir, filename, data,
                                                           words):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/")
    page.set_input_files("input[name=file]", files=[{"name": filename, "mimeType": "text/plain", "buffer": data}])
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#upload-refused")
    assert words in page.locator("#upload-refused").inner_text()
    assert page.locator("#upload-form .notice").count() == 0  # nothing inside the form itself
    refusal = page.locator("#upload-refused").locator("xpath=..")
    refusal.screenshot(path=str(output_dir / f"upload-refused-{filename}.png"))


def test_a_problem_that_fails_validation_is_excluded_with_its_rows_button(page, live_server_url, user, output_dir):
    from tests.factories import fail_validation, make_problem_set, problem_lines

    ps = make_problem_set(user, "humaneval upload", problem_lines(4, 1))
    fail_validation(ps, "add-2")
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/{ps.pk}/")
    warning = page.locator("#validation-warning")
    assert "Exclude it from runs with the Exclude button in its row below" in warning.inner_text()
    row = page.locator("#problems tr[data-problem='add-2']")
    assert page.locator("#problems button", has_text="Exclude").count() == 1  # only on the failing row
    row.get_by_role("button", name="Exclude").click()
    page.wait_for_selector("#problems tr.excluded[data-problem='add-2']")
    assert "add-2 is excluded: runs launched from now on skip it" in page.locator("body").inner_text()
    assert page.locator("#validation-warning").count() == 0
    assert "The 1 failing problem is excluded from runs." in page.locator("#validation-excluded").inner_text()
    assert page.locator("#count-excluded").inner_text().startswith("1")
    assert page.locator("#count-train").inner_text() == "3"
    assert row.get_by_role("button", name="Include").is_visible()
    page.screenshot(path=str(output_dir / "problem-set-excluded.png"))
