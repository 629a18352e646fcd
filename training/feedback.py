"""What the model is told after a failing turn, and the exact tokens that carry it (multi-turn repair).

``feedback_message(problem, result, code, config)`` writes the sandbox's answer to one execution as
a user message: the outcome (wrong answer, exception, timeout, memory, ...), at most
``tests_shown`` failing tests as the sandbox reported them, and the tail of the program's stderr.
It never reads the problem's reference solution, and for stdio problems it never shows a case's
expected output: the native format marks no case as an example (``sandbox/problems.py``:
``TestCase`` is ``input``/``output`` only), so every case counts as hidden and a failing case is
described by its input and verdict only (the sandbox's mismatch text, which quotes the expected
tokens, is left out).

``continuation_ids(tokenizer, feedback, ...)`` are the token ids appended after a reply to open
the next turn: the end of the assistant turn (only what the sampled tokens did not already hold:
an emitted ``<|im_end|>`` is kept as sampled), the user message, and the assistant opener, each
piece rendered by the tokenizer's own chat template. The trajectory is then one token sequence,
``prompt + reply_1 + feedback_1 + reply_2 + ...``, that the sampler continued and the trainer scores
as it is; the conversation is never re-rendered (Qwen3.5's template drops earlier ``<think>``
blocks when it renders a conversation again, which would change the tokens the model saw).
The feedback text itself is tokenised with special tokens split, so a ``<|im_end|>`` printed by the
candidate's program stays text and cannot end the user turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_TEST_CHARS = 400
"""Most characters of one failing test's text, and of its error, in a feedback message."""
MAX_INPUT_CHARS = 200
"""Most characters of a failing stdio case's input shown."""
FIX_REQUEST = ("Fix the program and reply with the complete corrected solution in a single ```python fenced "
               "code block.")

_OUTCOMES = {
    "failed": "wrong answer",
    "error": "the program raised an exception before the tests ran",
    "syntax_error": "the program does not compile",
    "timeout": "the program exceeded the time limit",
    "memory": "the program exceeded the memory limit",
    "output_limit": "the program printed more output than allowed",
    "killed": "the program was killed by a signal",
}


_DETAILED = ("error", "syntax_error", "timeout", "memory", "output_limit", "killed")
"""Statuses whose harness note (``detail``) says what ended the program (exception type and message, ...)."""


def feedback_message(problem: Any, result: Mapping[str, Any], code: str, config: Any) -> str:
    """The user message after a failing execution ``result`` (documented JSON) of ``code``.

    ``config`` is the run's ``FeedbackConfig`` (``tests_shown``, ``stderr_chars``, ``include_code``).
    """
    status = str(result.get("status", ""))
    tests = list(result.get("tests") or [])
    passed = sum(bool(t.get("passed")) for t in tests)
    outcome = _OUTCOMES.get(status, status or "the program failed")
    lines = [f"Your program did not pass: {outcome} ({passed} of {len(tests)} tests passed)."]
    detail = str(result.get("detail") or "").strip()
    if detail and status in _DETAILED:  # the exception, the compile error, the limit: never a comparison
        lines.append(_clip(detail, MAX_TEST_CHARS))
    if config.include_code and code.strip():
        lines += ["", "Your program:", "```python", code.rstrip("\n"), "```"]
    failing = [(i, t) for i, t in enumerate(tests) if not t.get("passed")]
    shown = failing[:config.tests_shown]
    if shown:
        lines += ["", "Failing tests:"]
        lines += [_describe_test(problem, i, t) for i, t in shown]
        if len(failing) > len(shown):
            lines.append(f"(and {len(failing) - len(shown)} more failing)")
    stderr = str(result.get("stderr") or "")
    if config.stderr_chars and stderr.strip():
        tail = stderr[-config.stderr_chars:]
        cut = " (last part)" if len(stderr) > len(tail) or result.get("stderr_truncated") else ""
        lines += ["", f"stderr{cut}:", "```", tail.rstrip("\n"), "```"]
    lines += ["", FIX_REQUEST]
    return "\n".join(lines)


def _describe_test(problem: Any, index: int, test: Mapping[str, Any]) -> str:
    name = str(test.get("name") or f"test {index + 1}")
    error = str(test.get("error") or "failed")
    if getattr(problem, "kind", "function") == "stdio":
        # The sandbox's mismatch text quotes the expected tokens: show the verdict and the input only.
        cases = getattr(problem, "test_cases", ()) or ()
        given = _clip(cases[index].input, MAX_INPUT_CHARS) if index < len(cases) else None
        verdict = "not run" if error.startswith("not run") else "wrong answer or runtime error"
        where = f" on input {given!r}" if given is not None else ""
        return f"- {name}: {verdict}{where} (expected output hidden)"
    source = getattr(problem, "tests", ()) or ()
    text = _clip(source[index], MAX_TEST_CHARS) if index < len(source) else ""
    body = f"`{text}` -> " if text else ""
    return f"- {name}: {body}{_clip(error, MAX_TEST_CHARS)}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# ------------------------------------------------------------------------------------------- tokens

_MARK = "\x00CRUCIBLE-FEEDBACK\x00"
_SYSTEM = "S"


def continuation_ids(tokenizer: Any, feedback: str, *, reply_ids: Sequence[int], eos_ids: Sequence[int],
                     thinking: bool) -> list[int]:
    """Token ids that follow a turn's sampled ``reply_ids`` to open the next turn with ``feedback``.

    ``[end of the assistant turn] + [user message with feedback] + [assistant opener]``, from the chat
    template. When the reply ended with an EOS id (Qwen's ``<|im_end|>``) only the rest of the turn's
    ending is added (``"\\n"``); a reply cut by the token limit or a stop string gets the whole ending.
    """
    close = assistant_turn_end(tokenizer)
    if reply_ids and int(reply_ids[-1]) in set(int(i) for i in eos_ids):
        emitted = tokenizer.decode([int(reply_ids[-1])], skip_special_tokens=False)
        close = close[len(emitted):] if close.startswith(emitted) else close
    head, tail = user_turn_parts(tokenizer, thinking)
    encode = lambda text, **kw: tokenizer(text, add_special_tokens=False, **kw)["input_ids"]  # noqa: E731
    return [*encode(close + head), *encode(feedback, split_special_tokens=True), *encode(tail)]


def assistant_turn_end(tokenizer: Any) -> str:
    """The text the chat template writes after an assistant message's content (ChatML: ``<|im_end|>\\n``)."""
    messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": _MARK}]
    text = _render(tokenizer, messages, generation_prompt=False, thinking=False)
    if _MARK not in text:
        raise ValueError("sampling.turns > 1 needs a chat template that renders assistant messages; this "
                         "tokenizer's template dropped one (use turns: 1)")
    return text[text.rindex(_MARK) + len(_MARK):]


def user_turn_parts(tokenizer: Any, thinking: bool) -> tuple[str, str]:
    """(before, after) the content of a user message appended to a conversation, the assistant opener
    included in ``after`` (with ``enable_thinking`` as the run's prompts have it). The conversation it is
    rendered after holds a user message already: some templates (Qwen3.5's) refuse one without."""
    opening = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": "U"}]
    before = _render(tokenizer, opening, generation_prompt=False, thinking=thinking)
    after = _render(tokenizer, [*opening, {"role": "user", "content": _MARK}], generation_prompt=True,
                    thinking=thinking)
    if not after.startswith(before) or _MARK not in after:
        raise ValueError("sampling.turns > 1 appends each feedback message to the conversation's tokens, but this "
                         "tokenizer's chat template does not render an added user message as a suffix (use turns: 1)")
    user = after[len(before):]
    head, tail = user.split(_MARK, 1)
    return head, tail


def _render(tokenizer: Any, messages: list[dict], *, generation_prompt: bool, thinking: bool) -> str:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                         enable_thinking=bool(thinking))
    return text if isinstance(text, str) else tokenizer.decode(text)
