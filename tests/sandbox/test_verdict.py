"""Host-side verdict logic without a sandbox: value decoding, the trusted evaluator, stdio checkers."""

from __future__ import annotations

import ast

import pytest

from sandbox import harness
from sandbox.interpret import Interpreter, first_request, plan_tests
from sandbox.verdict import Evaluator, Materialized, ProtocolViolation, compare_output, decode


@pytest.mark.parametrize("value", [0, -5, 2 ** 80, 1.5, float("inf"), "é\ud800", True, None,
                                   [1, (2, 3)], {"a": {1, 2}}, frozenset({4}), b"\x00x",
                                   bytearray(b"y"), 1 + 2j, {(1, 2): [None]}])
def test_values_survive_the_round_trip_with_their_exact_types(value):
    import json
    back = decode(json.loads(harness.dumps(harness.encode(value))))
    assert back == value and type(back) is type(value)


def test_subclasses_of_builtins_arrive_as_their_base_data():
    class Liar(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    assert type(decode(harness.encode(Liar(3)))) is int and decode(harness.encode(Liar(3))) == 3


def test_custom_objects_cannot_be_sent():
    with pytest.raises(harness.Unserializable, match="cannot be checked outside"):
        harness.encode(object())


def test_generators_arrive_as_iterators_equal_only_to_themselves():
    it = decode(harness.encode(x for x in (1, 2)))
    assert isinstance(it, Materialized) and list(it) == [1, 2] and it != [1, 2]


@pytest.mark.parametrize("node", [["x", []], ["l"], [1, 2], {"a": 1}, ["d", [[1]]], ["I", "zz"],
                                  ["d", [[["l", []], 1]]], 1.5])
def test_malformed_values_are_protocol_violations(node):
    with pytest.raises(ProtocolViolation):
        decode(node)


def _check(test: str, answers: dict):
    (plan,) = plan_tests([test])
    asked = []

    def ask(src, bindings):
        asked.append((src, bindings))
        return answers[src]

    def remote(src, bindings):
        raise AssertionError(f"nothing should run remotely: {src}")

    return Interpreter(plan, ask, remote, frozenset({"f"}), lambda: None).run(), asked


def test_only_the_candidates_sub_expressions_are_asked_for():
    why, asked = _check("assert sorted(f(3)) == [1, 2] and len(f(3)) == 2", {"f(3)": [2, 1]})
    assert why is None and [a for a, _ in asked] == ["f(3)", "f(3)"]


def test_loop_variables_are_sent_as_bindings_and_compared_here():
    why, asked = _check("for x in range(3):\n    assert f(x) == x * 2", {"f(x)": 0})
    assert why == "AssertionError: assert f(x) == x * 2"
    assert asked == [("f(x)", {"x": 0}), ("f(x)", {"x": 1})]


@pytest.mark.parametrize("source,why", [
    ("for x in range(5):\n    if x == 1:\n        continue\n    if x == 3:\n        break\n    assert f(x) == x\n"
     "else:\n    assert False", None),  # continue skips 1, break at 3 skips the else
    ("for x in range(2):\n    assert f(x) == x\nelse:\n    assert f(9) == 0", "AssertionError: assert f(9) == 0"),
    ("n = 0\nwhile n < 3:\n    n = n + 1\n    if n == 2:\n        continue\n    assert f(n) == n\nelse:\n"
     "    assert n == 3", None),
    ("n = 0\nwhile True:\n    n = n + 1\n    if n == 4:\n        break\nelse:\n    assert False\nassert f(n) == 5",
     "AssertionError: assert f(n) == 5"),
])
def test_loops_follow_break_continue_and_else(source, why):
    (plan,) = plan_tests([source])

    def ask(src, bindings):  # the candidate's f is the identity
        return eval(src, {"f": lambda v: v}, dict(bindings))

    def remote(src, bindings):
        raise AssertionError(f"nothing should run remotely: {src}")

    assert Interpreter(plan, ask, remote, frozenset({"f"}), lambda: None).run() == why


def test_huge_results_are_refused_instead_of_computed():
    why, _ = _check("assert f(1) ** 100000000 == 0", {"f(1)": 12345})
    assert why.startswith("OverflowError")


def test_simple_tests_are_pipelined_and_others_are_not():
    plans = plan_tests(["assert f(1) == [1]", "assert not f(2)", "assert f(1) == g(1)",
                        "x = f(1)\nassert x"])
    assert [first_request(p, frozenset({"f"})) for p in plans] == ["f(1)", "f(2)", None, None]


def test_the_evaluator_never_calls_a_shadowed_builtin():
    ev = Evaluator("len(x)", lambda src, b: "asked", frozenset({"len"}))
    assert ev.eval(ast.parse("len(x)", mode="eval").body) == "asked"


@pytest.mark.parametrize("checker,expected,actual,ok", [
    ("exact", "1 2\n", "1 2\n", True), ("exact", "1 2\n", "1 2", True),
    ("exact", "1 2\n", "1  2\n", False), ("tokens", "1 2\n", " 1\n2 ", True),
    ("tokens", "1 2 3", "1 2", False), ("tokens", "1 2", "1 2 3", False),
    ("float:1e-6", "0.3333333", "0.33333331", True), ("float:1e-6", "0.3", "0.31", False),
    ("float:1e-6", "1 2", "1", False), ("float:1e-6", "nan", "nan", True),
])
def test_stdio_checkers_compare_the_whole_output(checker, expected, actual, ok):
    assert compare_output(checker, expected, actual)[0] is ok


def test_a_display_calling_a_shadowed_set_is_not_taken_as_a_literal():
    source = "[set(), 1]"
    ev = Evaluator(source, lambda src, b: ("asked", src), frozenset({"set"}))
    node = ast.parse(source, mode="eval").body
    assert ev.eval(node) == [("asked", "set()"), 1]
    assert Evaluator(source, None, frozenset()).eval(node) == [set(), 1]  # not shadowed: trusted


def test_literal_displays_come_back_as_fresh_objects():
    node = ast.parse("[[1, 2], {'a': (3,)}]", mode="eval").body
    ev = Evaluator("", None, frozenset())
    first = ev.eval(node)
    first[0].append(99)
    assert ev.eval(node) == [[1, 2], {"a": (3,)}]
