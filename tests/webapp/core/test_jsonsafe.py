from webapp.core.jsonsafe import db_safe


def test_nul_characters_become_replacement_characters_everywhere():
    value = {"a\x00": ["x\x00y", ("\x00",), {"k": "\x00\x00"}], "n": 1, "f": 0.5, "none": None, "ok": "plain"}
    assert db_safe(value) == {"a\ufffd": ["x\ufffdy", ["\ufffd"], {"k": "\ufffd\ufffd"}], "n": 1, "f": 0.5,
                              "none": None, "ok": "plain"}


def test_strings_without_nul_are_returned_unchanged():
    text = "def f():\n    return 1\n"
    assert db_safe(text) is text


def test_lone_surrogates_become_replacement_characters_and_pairs_their_character():
    assert db_safe({"k\ud800": ["a\udfffb", "\ud83d\ude00"]}) == {"k\ufffd": ["a\ufffdb", "\U0001f600"]}
