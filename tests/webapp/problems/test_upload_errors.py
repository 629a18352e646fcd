"""Every refusal of an uploaded file shows in one place; a file of another type is refused, not parsed."""
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.problems.models import ProblemSet

from tests.factories import problem_lines


def _refusal(client, filename, data):
    r = client.post("/problem-sets/", {"name": "", "format": "auto", "file": SimpleUploadedFile(filename, data)})
    assert r.status_code == 400
    html = r.content.decode()
    notices = re.findall(r'<div class="notice error"[^>]*>(.*?)</div>', html, re.S)
    assert len(notices) == 1, notices  # one message, in one place
    assert 'id="upload-refused"' in html
    return notices[0]


@pytest.mark.parametrize("filename, data, words", [
    ("empty.jsonl", b"", "empty.jsonl is empty"),
    ("blank.jsonl", b"\n\n\n", "blank.jsonl: file has no problems"),
    ("notes.txt", b"hello\n", "notes.txt: .txt is not a problem file; upload .jsonl"),
])
def test_a_refused_file_is_explained_under_the_upload_form(client_alice, filename, data, words):
    assert words in _refusal(client_alice, filename, data)


def test_an_unknown_extension_is_refused_even_when_its_lines_would_parse(client_alice):
    message = _refusal(client_alice, "problems.txt", problem_lines(2, 1))
    assert ".jsonl (JSON Lines, one problem per line) or .jsonl.gz" in message
    assert not ProblemSet.objects.exists()


def test_the_api_refuses_an_unknown_extension_naming_the_accepted_ones(client_alice):
    r = client_alice.post("/api/problem-sets", {"file": SimpleUploadedFile("problems.csv", b"a,b\n")})
    assert r.status_code == 400
    body = r.json()
    assert ".csv is not a problem file" in body["detail"] and ".jsonl.gz" in body["detail"]
    assert body["errors"][0]["field"] == "file"


def test_a_file_without_extension_says_so(client_alice):
    assert "problems: no extension is not a problem file" in _refusal(client_alice, "problems", b"{}\n")
