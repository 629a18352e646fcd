"""Importing uploads into problem sets: every format, bad lines, size limit, gzip, refusals."""
import gzip

import pytest

from sandbox.formats import load_problems
from webapp.problems.models import Problem, ProblemSet
from webapp.problems.services import create_problem_set

from tests.factories import jsonl

from .conftest import ECHO, GOOD, upload_file

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("fmt", ["native", "humaneval", "mbpp", "apps", "codecontests"])
def test_each_format_sample_is_imported_with_its_format_detected(user, samples, fmt):
    path = samples / f"{fmt}.jsonl"
    expected = load_problems(path)
    ps, errors = create_problem_set(user, "", upload_file(path.read_bytes(), path.name), validate=False)
    assert ps is not None, errors
    assert ps.format == fmt
    assert ps.name == fmt
    assert errors == [e.to_dict() for e in expected.errors]
    assert ps.problem_count == len(expected.problems) > 0
    assert [p.data for p in ps.problems.order_by("position")] == [p.to_dict() for p in expected.problems]
    assert ps.train_count + ps.heldout_count == ps.problem_count


def test_a_forced_format_is_used_instead_of_detection(user, samples):
    content = (samples / "mbpp.jsonl").read_bytes()
    ps, errors = create_problem_set(user, "m", upload_file(content), "mbpp", validate=False)
    assert ps.format == "mbpp" and ps.problem_count > 0
    refused, errors = create_problem_set(user, "h", upload_file(content), "humaneval", validate=False)
    assert refused is None
    assert errors and all(e["line"] >= 1 for e in errors)


def test_bad_lines_are_reported_with_line_and_field_while_good_problems_are_kept(user):
    missing_entry_point = {k: v for k, v in GOOD.items() if k != "entry_point"} | {"id": "no-entry"}
    content = jsonl(GOOD) + b'{"id": "broken", "kind": \n' + jsonl(missing_entry_point, ECHO, GOOD)
    ps, errors = create_problem_set(user, "mixed", upload_file(content), validate=False)
    assert ps is not None
    assert list(ps.problems.values_list("problem_id", flat=True)) == ["add", "echo-sum"]
    by_line = {e["line"]: e for e in errors}
    assert set(by_line) == {2, 3, 5}
    assert "invalid JSON" in by_line[2]["message"]
    assert by_line[3]["field"] == "entry_point"
    assert by_line[5]["field"] == "id" and "duplicate" in by_line[5]["message"]
    assert ps.import_errors == errors
    assert (ps.train_count, ps.heldout_count) == (1, 1)


def test_a_file_with_no_good_problem_is_refused_and_nothing_is_stored(user):
    ps, errors = create_problem_set(user, "bad", upload_file(b'{"id": 1}\nnot json\n'), validate=False)
    assert ps is None
    assert [e["line"] for e in errors] == [1, 2]
    assert not ProblemSet.objects.exists() and not Problem.objects.exists()


def test_an_empty_file_is_refused_with_a_message(user):
    ps, errors = create_problem_set(user, "empty", upload_file(b"", "empty.jsonl"), validate=False)
    assert ps is None
    assert errors == [{"line": 0, "field": "file", "message": "empty.jsonl is empty"}]


def test_an_oversized_upload_is_refused_with_the_limit_in_the_message(user, settings):
    settings.UPLOAD_MAX_BYTES = 1024 * 1024
    content = jsonl(GOOD) + b" " * (1024 * 1024)
    ps, errors = create_problem_set(user, "big", upload_file(content, "big.jsonl"), validate=False)
    assert ps is None
    assert len(errors) == 1 and errors[0]["field"] == "file"
    assert "big.jsonl is larger than the upload limit of 1.0 MiB" in errors[0]["message"]
    assert not ProblemSet.objects.exists()


def test_a_gzip_upload_is_decompressed(user, gz):
    ps, errors = create_problem_set(user, "", upload_file(gz(jsonl(GOOD, ECHO)), "mine.jsonl.gz"), validate=False)
    assert errors == []
    assert ps.name == "mine" and ps.problem_count == 2


def test_the_humaneval_gzip_sample_is_imported(user, samples):
    ps, errors = create_problem_set(user, "he", upload_file((samples / "humaneval.jsonl.gz").read_bytes(),
                                                            "humaneval.jsonl.gz"), validate=False)
    expected = load_problems(samples / "humaneval.jsonl.gz")
    assert ps.format == "humaneval" and ps.problem_count == len(expected.problems) > 0
    assert [p.data for p in ps.problems.order_by("position")] == [p.to_dict() for p in expected.problems]


def test_an_unknown_format_is_refused(user):
    ps, errors = create_problem_set(user, "x", upload_file(jsonl(GOOD)), "parquet", validate=False)
    assert ps is None and errors[0]["field"] == "format" and "'parquet'" in errors[0]["message"]


def _gzip_of(line: bytes, total: int) -> bytes:
    import io

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as f:
        for _ in range(total // (len(line) * 65536)):
            f.write(line * 65536)
    return buf.getvalue()


def _peak_bytes(fn):
    import tracemalloc

    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_flood_of_tiny_lines_is_refused_at_the_line_limit_with_bounded_memory(client_alice, settings):
    settings.UPLOAD_MAX_LINES = 1000
    bomb = _gzip_of(b"{}\n", 64 << 20)  # 64 MiB of tiny lines in a small .gz
    response, peak = _peak_bytes(lambda: client_alice.post(
        "/api/problem-sets", {"file": upload_file(bomb, "flood.jsonl.gz")}))
    assert response.status_code == 400
    assert "more than 1000 lines" in response.json()["detail"] and "CRUCIBLE_UPLOAD_MAX_LINES" in response.json()["detail"]
    assert peak < 48 << 20
    assert not ProblemSet.objects.exists()


def test_a_gzip_bomb_is_refused_at_the_expanded_limit_with_bounded_memory(user, settings):
    settings.UPLOAD_MAX_EXPANDED_BYTES = 8 << 20
    bomb = _gzip_of(b" " * 1023 + b"\n", 256 << 20)
    (ps, errors), peak = _peak_bytes(lambda: create_problem_set(user, "bomb", upload_file(bomb, "b.jsonl.gz"),
                                                                validate=False))
    assert ps is None and errors[0]["field"] == "file"
    assert "decompresses to more than 8 MiB" in errors[0]["message"]
    assert peak < 48 << 20
