"""Thinking chat models: what of a reply reaches the sandbox, and a thinking run end to end."""

import json

import pytest

from training.candidates import sandbox_reply


def test_without_thinking_the_reply_goes_to_the_sandbox_as_it_is():
    reply = "Here:\n```python\ndef f():\n    return 1\n```\n"
    assert sandbox_reply(reply, thinking=False) == reply


def test_the_code_is_the_last_fenced_block_after_the_thinking():
    reply = ("<think>\nA draft:\n```python\ndef f():\n    return 0\n```\nno, off by one\n</think>\n\n"
             "First try:\n```python\ndef f():\n    return 2\n```\nFinal:\n```python\ndef f():\n    return 1\n```\n")
    assert sandbox_reply(reply, thinking=True) == "```python\ndef f():\n    return 1\n```\n"


def test_a_reply_whose_thinking_never_closed_gets_no_code():
    assert sandbox_reply("<think>\n```python\ndef f():\n    return 1\n```\nhmm, but", thinking=True) == ""


def test_an_answer_without_a_fence_is_passed_on_for_the_format_reward_to_judge():
    assert sandbox_reply("<think>ok</think>\ndef f(): return 1", thinking=True) == "\ndef f(): return 1"


@pytest.mark.parametrize("thinking", [False, True], ids=["answer", "think"])
def test_a_chat_run_with_and_without_thinking_trains(tmp_path, tiny_model_dir, train_problems_file, runner,
                                                     thinking):
    from tests.training.conftest import tiny_run_config
    from training.events import read_events
    from training.trainer import train

    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1},
                          sampling={"prompt_style": "chat", "thinking": thinking, "max_new_tokens": 12})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert events[0]["config"]["sampling"]["thinking"] is thinking
    cands = [c for e in events if e["event"] == "problem" for c in e["candidates"]]
    assert cands and all(isinstance(c["truncated"], bool) for c in cands)
    json.dumps(events)  # every event stays plain JSON
