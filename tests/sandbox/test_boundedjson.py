"""sandbox.boundedjson: depth counted before decoding (brackets in strings not counted), bounds named."""
import json

import pytest

from sandbox.boundedjson import JSONRefused, loads, nesting_depth


@pytest.mark.parametrize("text, depth", [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('["[[[[", "{{{{"]', 1),
    ('["a\\"[[[[", "\\\\", [2]]', 2), ('"[[[', 0), ("[" * 50_000, 50_000),
])
def test_the_depth_is_counted_outside_strings(text, depth):
    assert nesting_depth(text) == depth


def test_a_deep_document_is_refused_naming_the_limit_and_a_shallow_one_is_read():
    with pytest.raises(JSONRefused) as e:
        loads("[" * 50_000 + "]" * 50_000, max_depth=32)
    assert e.value.reason == "depth" and "32 levels" in str(e.value)
    assert loads("[" * 32 + "]" * 32, max_depth=32) == json.loads("[" * 32 + "]" * 32)
    assert loads(b'{"a": ["[[[[[["]}', max_depth=2) == {"a": ["[[[[[["]}


@pytest.mark.parametrize("data, reason", [
    ("x" * 11, "size"), (b"\xff\xfe\x00", "encoding"), ("{", "syntax"), ("9" * 5000, "syntax"), ("", "syntax"),
])
def test_every_refusal_is_a_json_refused_with_its_reason(data, reason):
    with pytest.raises(JSONRefused) as e:
        loads(data, max_depth=4, max_size=10 if reason == "size" else None)
    assert e.value.reason == reason


def test_an_unterminated_string_full_of_escaped_quotes_is_refused_in_one_pass():
    # A regular expression that retried each quote as a string's start took quadratic time here.
    with pytest.raises(JSONRefused):
        loads('["' + '\\"[' * 500_000, max_depth=4)
