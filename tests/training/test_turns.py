"""Multi-turn repair: config, feedback content, exact trajectory tokens, masking, credit, metrics, runs."""

import json

import pytest
import torch

from tests.training.conftest import PROBLEMS, tiny_run_config
from training.events import read_events

RIGHT = {"add": "def add(a, b):\n    return a + b\n", "sub": "def sub(a, b):\n    return a - b\n",
         "neg": "def neg(a):\n    return -a\n", "mul": "def mul(a, b):\n    return a * b\n"}
WRONG = {"add": "def add(a, b):\n    import sys\n    print('looking', file=sys.stderr)\n    return a - b\n"}
STUBBORN = "def add(a, b):\n    return a * b\n"
"""A wrong answer that a trajectory keeps giving at every turn (``ScriptedEngine(wrong_samples=...)``)."""


def _problems(*ids):
    from sandbox.problems import Problem

    return [Problem.from_dict(p) for p in PROBLEMS if p["id"] in ids]


def _reply(code):
    return f"```python\n{code}```"


class ScriptedEngine:
    """An engine whose replies are scripted per (problem, turn): ``WRONG`` code at turn 1 where there is
    some, the right code otherwise; each reply tokenised and ended with ``<|im_end|>`` (an emitted EOS)."""

    name = "scripted"

    def __init__(self, tokenizer, problems, wrong=WRONG, think="", wrong_samples=None):
        self.tokenizer = tokenizer
        self.problems = problems
        self.wrong = wrong
        self.think = think
        self.wrong_samples = wrong_samples
        """None: every sample gets the wrong code at turn 1; else sample j -> False (``WRONG`` at turn 1),
        True (``STUBBORN`` at every turn); a sample not named is right at once."""
        self.calls = []  # (turn, prompt_ids)
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def stream(self, prompts, sampling, *, n, seed, prompt_ids=None):
        from training.generation import GenerationBatch, encode_prompts

        turn = len(self.calls) + 1
        encoded = encode_prompts(self.tokenizer, prompts, sampling, prompt_ids=prompt_ids)
        self.calls.append((turn, encoded))
        batch = GenerationBatch([], [], [], [], [], [], prompts=list(prompts))
        for p, ids in enumerate(encoded):
            problem = next(q for q in self.problems if prompts[p].find(f"`{q.entry_point}`") >= 0)
            code = self.wrong.get(problem.id) if turn == 1 else None
            for j in range(n):
                answer = code
                if self.wrong_samples is not None and code is not None:
                    answer = {True: STUBBORN, False: code}.get(self.wrong_samples.get(j))
                elif turn > 1 and STUBBORN in self.tokenizer.decode(ids):  # it answered that before
                    answer = STUBBORN
                text = self.think + _reply(answer or RIGHT[problem.id])
                reply = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos]
                batch.prompt_ids.append(list(ids))
                batch.completion_ids.append(reply)
                batch.texts.append(text)
                batch.prompt_index.append(p)
                batch.finish_reasons.append("eos")
                batch.generated_tokens.append(len(reply))
                batch.sampler_logprobs.append([-1.0] * len(reply))
        yield list(range(len(batch))), batch

    def sync(self, model):
        pass

    def describe(self):
        return {"name": self.name}

    def close(self):
        pass


def _sampling(**extra):
    from training.config import SamplingConfig

    return SamplingConfig(**{"prompt_style": "chat", "turns": 2, "candidates_per_problem": 2, **extra})


@pytest.fixture(scope="module")
def tokenizer(qwen3_model_dir):
    from training.policy import load_tokenizer

    return load_tokenizer(str(qwen3_model_dir))


def _scripted_rollout(tokenizer, runner, ids=("add", "sub"), wrong_samples=None, **sampling):
    from training.rollout import start_rollout

    problems = _problems(*ids)
    engine = ScriptedEngine(tokenizer, problems, think=sampling.pop("think", ""), wrong_samples=wrong_samples)
    pending = start_rollout(engine, tokenizer, problems, _sampling(**sampling), runner, generator_seed=0)
    return engine, pending, pending.finish()


# ---------------------------------------------------------------------------------------------- config


def test_a_completion_style_config_with_several_turns_is_refused_naming_the_field():
    from training.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError) as e:
        config_from_dict({"sampling": {"turns": 2}})
    assert e.value.field == "sampling.turns" and "prompt_style: chat" in str(e.value)
    cfg = config_from_dict({"sampling": {"turns": 3, "prompt_style": "chat"},
                            "feedback": {"tests_shown": 1, "stderr_chars": 0}, "reward": {"turns": "discounted"}})
    assert (cfg.sampling.turns, cfg.feedback.tests_shown, cfg.reward.turns, cfg.reward.turn_discount) == (
        3, 1, "discounted", 0.4)
    with pytest.raises(ConfigError) as e:
        config_from_dict({"reward": {"turns": "average"}})
    assert e.value.field == "reward.turns"


# -------------------------------------------------------------------------------------------- feedback


def test_the_feedback_shows_failing_tests_outcome_and_stderr_tail_and_never_the_reference(runner):
    from sandbox import Candidate
    from training.config import FeedbackConfig
    from training.feedback import feedback_message

    problem = _problems("add")[0]
    code = "def add(a, b):\n    import sys\n    print('x' * 50 + 'TAIL', file=sys.stderr)\n    return a - b\n"
    result = runner.run_batch({problem.id: problem}, [Candidate(problem.id, code=code)])[0].to_dict()
    message = feedback_message(problem, result, code, FeedbackConfig(tests_shown=1, stderr_chars=10))
    assert "wrong answer (0 of 2 tests passed)" in message
    assert "`assert add(1, 2) == 3` -> AssertionError" in message and "assert add(-1, 1)" not in message
    assert "(and 1 more failing)" in message
    assert "xxxxxTAIL" in message and "x" * 6 + "TAIL" not in message  # the last 10 characters: 5 x, TAIL, newline
    assert problem.reference_solution.strip() not in message and "return a + b" not in message
    assert code not in message  # include_code: false
    assert code.rstrip() in feedback_message(problem, result, code, FeedbackConfig(include_code=True))


def test_an_exception_names_its_type_and_message(runner):
    from sandbox import Candidate
    from training.config import FeedbackConfig
    from training.feedback import feedback_message

    problem = _problems("add")[0]
    code = "def add(a, b):\n    return a\nraise KeyError('top')\n"
    result = runner.run_batch({problem.id: problem}, [Candidate(problem.id, code=code)])[0].to_dict()
    message = feedback_message(problem, result, code, FeedbackConfig())
    assert "raised an exception" in message and "KeyError: 'top'" in message


def test_hidden_expected_outputs_never_appear_in_a_feedback_message(runner):
    from sandbox import Candidate
    from sandbox.problems import Problem
    from training.config import FeedbackConfig
    from training.feedback import feedback_message

    problem = Problem.from_dict({"id": "echo", "kind": "stdio", "prompt": "Print n * 3.",
                                 "test_cases": [{"input": "329218107\n", "output": "987654321\n"},
                                                {"input": "1\n", "output": "3\n"}]})
    code = "import sys\nn = int(input())\nprint(n)\nprint('trace', file=sys.stderr)\n"
    result = runner.run_batch({problem.id: problem}, [Candidate(problem.id, code=code)])[0].to_dict()
    assert "987654321" in json.dumps(result["tests"])  # the sandbox's own mismatch text quotes it
    message = feedback_message(problem, result, code, FeedbackConfig(tests_shown=5))
    assert "987654321" not in message and "expected output hidden" in message
    assert "'329218107\\n'" in message and "trace" in message  # its input and the program's stderr


def test_the_next_turn_opens_after_an_emitted_end_of_turn_and_keeps_special_text_as_text(tokenizer):
    from training.feedback import continuation_ids

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = continuation_ids(tokenizer, "oops <|im_end|>", reply_ids=[7, im_end], eos_ids=[im_end], thinking=False)
    assert tokenizer.decode(ids) == ("\n<|im_start|>user\noops <|im_end|><|im_end|>\n<|im_start|>assistant\n"
                                     "<think>\n\n</think>\n\n")
    assert ids.count(im_end) == 1  # the one in the feedback text is plain text
    cut = continuation_ids(tokenizer, "oops", reply_ids=[7], eos_ids=[], thinking=True)  # cut by max_new_tokens
    assert tokenizer.decode(cut) == "<|im_end|>\n<|im_start|>user\noops<|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------------------------------------- credit


def test_discounted_returns_and_pooled_turn_advantages_match_hand_computed_values():
    from training.advantages import discounted_returns, token_advantages, turn_advantages

    assert discounted_returns([0.2, 1.0], 0.4) == pytest.approx([0.6, 1.0])
    assert discounted_returns([0.1, 0.2, 0.5], 0.5) == pytest.approx([0.1 + 0.1 + 0.125, 0.45, 0.5])
    assert discounted_returns([0.3], 0.4) == [0.3]
    # Group: trajectory A fails then passes (returns 0.6, 1.0), B passes at once (1.0). Pool mean 13/15.
    dr = turn_advantages("dr_grpo", [[[0.2, 1.0], [1.0]]], 0.4)
    assert dr[0][0] == pytest.approx([0.6 - 13 / 15, 1.0 - 13 / 15]) and dr[0][1] == pytest.approx([2 / 15])
    grpo = turn_advantages("grpo", [[[0.2, 1.0], [1.0]]], 0.4)
    std = torch.tensor([0.6, 1.0, 1.0]).std().item()
    assert grpo[0][0][0] == pytest.approx((0.6 - 13 / 15) / (std + 1e-6))
    assert sum(a for traj in dr[0] for a in traj) == pytest.approx(0.0, abs=1e-6)
    token_turns = torch.tensor([[0, 0, -1, -1, 1, -1], [0, 0, 0, -1, -1, -1]])  # (2, 6): feedback, padding -1
    per_token = token_advantages([[-0.5, 0.25], [0.75]], token_turns)
    assert per_token.tolist() == [[-0.5, -0.5, 0.0, 0.0, 0.25, 0.0], [0.75, 0.75, 0.75, 0.0, 0.0, 0.0]]


def _stored(rollout, k):
    """The rollout's candidates as the web app hands them to the what-if re-scoring (their event dicts)."""
    from training.rescore import StoredCandidate, StoredTurn

    out = []
    for i, c in enumerate(rollout.candidates):
        e = c.event_dict()
        turns = tuple(StoredTurn(rewards=t["rewards"], reward=t["reward"], flags=tuple(t["flags"]),
                                 overlong_penalty=t["overlong_penalty"]) for t in e["turns"])
        out.append(StoredCandidate(step=1, problem_id=c.problem_id, index=i % k, rewards=e["rewards"],
                                   reward=e["reward"], flags=tuple(e["result"].get("flags") or ()),
                                   overlong_penalty=e.get("overlong_penalty", 0.0), turns=turns))
    return out


@pytest.mark.parametrize("credit", ["final", "discounted"])
def test_what_if_rescoring_gives_each_turn_the_advantage_training_gives_its_tokens(tokenizer, runner, credit):
    """The what-if answer for a real two-turn rollout equals the trainer's own advantages, per token of
    each turn: under the run's weights (before) and after re-scoring the same executions with others."""
    from training.advantages import clip_advantages, compute_advantages
    from training.config import config_from_dict
    from training.rescore import RewardSettings, rescore
    from training.trainer import _discounted_advantages
    from training.turns import score_trajectories

    # add: #0 fails then repairs, #1 passes at once, #2 fails twice; sub: all pass at once
    _, pending, rollout = _scripted_rollout(tokenizer, runner, wrong_samples={0: False, 2: True},
                                            candidates_per_problem=3)
    cfg = config_from_dict({"sampling": {"turns": 2, "prompt_style": "chat", "candidates_per_problem": 3},
                            "reward": {"turns": credit, "turn_discount": 0.4, "clip": 0.9}})
    other = {"pass_rate": 0.1, "syntax": 0.0, "efficiency": 0.0, "conciseness": 1.0, "format": 0.3}
    rescored = score_trajectories(pending.problems, pending.trajectories, rollout.batch, group_size=3,
                                  weights=other)
    token_turns = rollout.batch.padded(tokenizer.pad_token_id)["token_turns"]  # (N, C)

    def trained(r):  # what the trainer gives each turn's tokens: per candidate, per turn
        if credit == "discounted":
            adv = _discounted_advantages(cfg, r, token_turns)  # (N, C)
            return [[adv[n][(token_turns[n] == t).nonzero()[0, 0]].item() for t in range(len(c.turns))]
                    for n, c in enumerate(r.candidates)]
        adv = clip_advantages(compute_advantages(cfg.ppo.advantage, r.rewards), cfg.reward.clip).flatten()  # (N,)
        return [[adv[n].item()] * len(c.turns) for n, c in enumerate(r.candidates)]

    out = rescore(_stored(rollout, 3), RewardSettings.from_config(cfg), other)
    rows = {(p["problem_id"], c["index"]): c for p in out["problems"] for c in p["candidates"]}
    for n, (cand, before, after) in enumerate(zip(rollout.candidates, trained(rollout), trained(rescored))):
        turns = rows[(cand.problem_id, n % 3)]["turns"]
        assert [t["advantage_before"] for t in turns] == pytest.approx(before, abs=1e-6)
        assert [t["advantage_after"] for t in turns] == pytest.approx(after, abs=1e-6)
        assert [t["reward_after"] for t in turns] == pytest.approx(rescored.candidates[n].turn_rewards)
    add = [rows[("add", i)] for i in (0, 1, 2)]
    assert [len(c["turns"]) for c in add] == [2, 1, 2]
    assert any(abs(t["advantage_before"]) > 0.01 for c in add for t in c["turns"])  # the group has signal
    assert any(t["advantage_before"] != pytest.approx(t["advantage_after"]) for c in add for t in c["turns"])


# --------------------------------------------------------------------------------------------- rollout


def test_a_failing_turn_gets_the_feedback_and_a_second_turn_on_one_exact_token_sequence(tokenizer, runner):
    from training.turns import turn_metrics

    engine, pending, rollout = _scripted_rollout(tokenizer, runner)
    assert [len(c.turns) for c in rollout.candidates] == [2, 2, 1, 1]  # add fails at first, sub passes
    first, second = rollout.candidates[0].turns
    assert first["result"]["status"] == "failed" and second["result"]["status"] == "passed"
    assert "`assert add(1, 2) == 3`" in first["feedback"] and "looking" in first["feedback"]
    assert second["feedback"] is None and rollout.candidates[2].turns[0]["feedback"] is None
    own = rollout.candidates[0]
    assert (own.code, own.reward, own.passed) == (second["code"], second["reward"], True)
    assert first["reward"] < second["reward"]

    # Turn 2 is one engine call for the two unfinished trajectories, conditioned on their exact ids.
    assert [(t, len(ids)) for t, ids in engine.calls][1][0] == 2 and len(engine.calls[1][1]) == 2
    traj = pending.trajectories[0]
    t1 = traj.turns[0]
    assert engine.calls[1][1][0] == traj.prompt_ids + t1.completion_ids + t1.feedback_ids
    batch = rollout.batch
    t2 = traj.turns[1]
    assert batch.prompt_ids[0] == traj.prompt_ids == engine.calls[0][1][0]
    assert batch.completion_ids[0] == t1.completion_ids + t1.feedback_ids + t2.completion_ids
    assert batch.completion_turns[0] == ([0] * len(t1.completion_ids) + [-1] * len(t1.feedback_ids)
                                         + [1] * len(t2.completion_ids))
    assert batch.completion_turns[2] == [0] * len(batch.completion_ids[2])
    assert batch.sampler_logprobs[0] == [-1.0] * len(t1.completion_ids) + [0.0] * len(t1.feedback_ids) + \
        [-1.0] * len(t2.completion_ids)
    feedback_text = tokenizer.decode(t1.feedback_ids)
    assert feedback_text.startswith("\n<|im_start|>user\nYour program did not pass")
    assert feedback_text.endswith("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")

    tensors = batch.padded(tokenizer.pad_token_id)
    assert tensors["loss_mask"].sum(-1).tolist() == [len(t1.completion_ids) + len(t2.completion_ids)] * 2 + [
        len(batch.completion_ids[2])] * 2
    assert (tensors["loss_mask"] <= tensors["completion_mask"]).all()

    metrics = turn_metrics(rollout.candidates, 2)
    assert metrics["pass@1/turn1"] == 0.5 and metrics["pass@1/final"] == 1.0
    assert metrics["repair/rate"] == 1.0 and metrics["turns/mean"] == 1.5
    assert metrics["reward/turn2"] == pytest.approx(second["reward"])
    assert metrics["reward/turn1"] == pytest.approx((2 * first["reward"] + 2 * rollout.candidates[2].reward) / 4)


def test_an_engine_is_sized_for_a_later_turns_prompt_and_a_real_feedback_fits_the_budget(tokenizer, runner):
    from training.config import FeedbackConfig
    from training.generation import build_prompt
    from training.turns import engine_prompt_tokens, feedback_token_budget

    problems, feedback = _problems("add", "sub"), FeedbackConfig()
    first = max(len(tokenizer(build_prompt(p, tokenizer, "chat", False))["input_ids"]) for p in problems)
    assert engine_prompt_tokens(tokenizer, problems, _sampling(turns=1), feedback) == first
    three = _sampling(turns=3, max_new_tokens=16)
    assert engine_prompt_tokens(tokenizer, problems, three, feedback) == first + 2 * (
        16 + feedback_token_budget(feedback, three))
    _, pending, _ = _scripted_rollout(tokenizer, runner)
    told = [tr.turns[0].feedback_ids for tr in pending.trajectories if len(tr.turns) == 2]
    assert told and max(map(len, told)) <= feedback_token_budget(feedback, _sampling())


def test_with_a_thinking_template_that_drops_old_thinking_the_trajectory_keeps_every_token(tokenizer, runner):
    from training.generation import build_prompt

    # Qwen3.5-style: earlier assistant turns are rendered without their <think> block.
    dropping = tokenizer.chat_template.replace(
        "message['content']",
        "(message['content'].split('</think>')[-1] if message['role'] == 'assistant' and not loop.last "
        "else message['content'])")
    original = tokenizer.chat_template
    tokenizer.chat_template = dropping
    try:
        engine, pending, rollout = _scripted_rollout(tokenizer, runner, ids=("add",), thinking=True,
                                                     think="<think>draft: subtract?</think>\n")
        traj = pending.trajectories[0]
        turn2_prompt = engine.calls[1][1][0]
        assert tokenizer.decode(turn2_prompt).count("draft: subtract?") == 1  # kept, as the model saw it
        problem = _problems("add")[0]
        rerendered = tokenizer.apply_chat_template(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
             {"role": "assistant", "content": traj.turns[0].reply}, {"role": "user", "content": "f"}],
            tokenize=False, add_generation_prompt=True, enable_thinking=True)
        assert "draft: subtract?" not in rerendered  # what re-rendering the chat would have fed the model
        assert build_prompt(problem, tokenizer, "chat", True) in tokenizer.decode(turn2_prompt)
        assert rollout.candidates[0].passed and len(rollout.candidates[0].turns) == 2
    finally:
        tokenizer.chat_template = original


def test_merging_groups_keeps_each_trajectorys_turn_tags(tokenizer, runner):
    from training.dynamic_sampling import merge_rollouts

    _, _, rollout = _scripted_rollout(tokenizer, runner)
    merged = merge_rollouts([(rollout, 1), (rollout, 0)])
    assert merged.batch.completion_turns == rollout.batch.completion_turns[2:] + rollout.batch.completion_turns[:2]
    assert [len(c.turns) for c in merged.candidates] == [1, 1, 2, 2]


def test_evaluation_reports_pass_at_1_at_turn_one_and_after_every_turn(tokenizer, runner):
    from training.evaluation import evaluate

    problems = _problems("add", "sub")
    engine = ScriptedEngine(tokenizer, problems)
    report = evaluate(engine, tokenizer, problems, _sampling(), samples=2, runner=runner, record=True)
    assert report["pass@1/turn1"] == 0.5 and report["pass@1"] == 1.0
    assert report["per_problem"]["add"]["pass@1/turn1"] == 0.0 and report["per_problem"]["add"]["pass@1"] == 1.0
    assert [len(c["turns"]) for c in report["per_problem"]["add"]["candidates"]] == [2, 2]


def test_the_probe_counts_a_trajectory_that_passes_by_its_last_turn(tokenizer, runner):
    from training.probe import probe

    problems = _problems("add")
    results = list(probe(ScriptedEngine(tokenizer, problems), tokenizer, problems, _sampling(), runner, samples=2))
    assert [(r.problem_id, r.passed) for r in results] == [("add", 2)]
    one_turn = list(probe(ScriptedEngine(tokenizer, problems), tokenizer, problems, _sampling(turns=1), runner,
                          samples=2))
    assert one_turn[0].passed == 0


# ----------------------------------------------------------------------------------------- tokens/loss


def test_feedback_tokens_carry_no_gradient_and_sampler_and_trainer_agree_on_a_two_turn_trajectory(
        tiny_model_dir, runner):
    """A real two-turn rollout of each tiny architecture (thinking on): the trainer's log-probs of the
    sampled tokens equal the sampler's as closely as in one turn, and the loss has no gradient on the
    feedback tokens while every token of the model's replies has one."""
    from training.config import FeedbackConfig
    from training.losses import logprob_mismatch, ppo_loss
    from training.policy import load_policy, sequence_logprobs
    from training.rollout import start_rollout

    policy = load_policy(tiny_tuple_config(tiny_model_dir), kl_coef=0.0)
    problems = _problems("add", "sub")
    sampling = _sampling(max_new_tokens=10, thinking=True)
    pending = start_rollout(policy.model, policy.tokenizer, problems, sampling, runner, generator_seed=3,
                            feedback=FeedbackConfig(stderr_chars=200))
    rollout = pending.finish()
    batch = rollout.batch
    assert all(len(c.turns) == 2 for c in rollout.candidates)  # a random model never passes
    t = batch.padded(policy.tokenizer.pad_token_id)
    feedback = (t["token_turns"] == -1) & (t["completion_mask"] == 1)  # (B, C)
    assert feedback.any() and (t["loss_mask"][feedback] == 0).all()
    policy.model.eval()
    c = t["completion_mask"].shape[1]
    logp, _ = sequence_logprobs(policy.model, t["input_ids"], t["attention_mask"], c, temperature=1.0)  # (B, C)
    max_diff, k3_sum, tokens = logprob_mismatch(logp, t["sampler_logprobs"], t["loss_mask"])
    assert tokens == t["loss_mask"].sum().item() and max_diff < 1e-3 and k3_sum / tokens < 1e-6
    leaf = logp.detach().clone().requires_grad_(True)
    loss, _ = ppo_loss(leaf, leaf.detach(), torch.ones(len(batch)), t["loss_mask"])
    loss.backward()
    assert (leaf.grad[feedback] == 0).all() and (leaf.grad[t["loss_mask"].bool()] != 0).all()


def tiny_tuple_config(model_dir):
    from training.config import ModelConfig

    return ModelConfig(name_or_path=str(model_dir))


# ------------------------------------------------------------------------------------------------ runs


def test_a_one_turn_run_takes_todays_path(tmp_path, qwen3_model_dir, train_problems_file, runner, monkeypatch):
    from training import turns
    from training.trainer import train

    def refuse(*args, **kwargs):
        raise AssertionError("a one-turn run must not build trajectories")

    monkeypatch.setattr(turns, "start_trajectories", refuse)
    steady = {"weights": {"efficiency": 0.0}}  # no timing in the rewards: two runs can be compared exactly
    cfg = tiny_run_config(qwen3_model_dir, train_problems_file, train={"steps": 1},
                          sampling={"prompt_style": "chat", "max_new_tokens": 8}, reward=steady)
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    metrics = next(e for e in events if e["event"] == "step")["metrics"]
    assert not any(k.startswith(("pass@1/turn", "repair/", "turns/", "reward/turn")) for k in metrics)
    assert all("turns" not in c for e in events if e["event"] == "problem" for c in e["candidates"])

    # The multi-turn settings change nothing in a one-turn run: the same candidates, rewards and update.
    other = tiny_run_config(qwen3_model_dir, train_problems_file, train={"steps": 1},
                            sampling={"prompt_style": "chat", "max_new_tokens": 8},
                            reward={**steady, "turns": "discounted", "turn_discount": 0.9},
                            feedback={"tests_shown": 1, "stderr_chars": 10, "include_code": True})
    assert train(other, tmp_path / "other", runner=runner, progress=False) == "succeeded"
    again = read_events(tmp_path / "other" / "events.jsonl")
    scored = lambda evs: [(c["code"], c["reward"], c["rewards"]) for e in evs  # noqa: E731
                          if e["event"] == "problem" for c in e["candidates"]]
    assert scored(again) == scored(events) and len(scored(events)) == 8
    step = next(e for e in again if e["event"] == "step")["metrics"]
    for key in ("reward/mean", "loss/policy", "grad_norm", "entropy", "clip_frac"):
        assert step[key] == pytest.approx(metrics[key], rel=1e-6, abs=1e-9), key


@pytest.mark.parametrize("credit", ["discounted"])
def test_a_two_turn_run_trains_evaluates_and_reports_turn_metrics(tmp_path, tiny_model_dir, problems_file, runner,
                                                                   credit):
    from training.trainer import train

    cfg = tiny_run_config(tiny_model_dir, problems_file, train={"steps": 1},
                          sampling={"prompt_style": "chat", "turns": 2, "max_new_tokens": 10},
                          reward={"turns": credit})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    metrics = next(e for e in events if e["event"] == "step")["metrics"]
    for key in ("pass@1/turn1", "pass@1/final", "repair/rate", "turns/mean", "reward/turn1", "reward/turn2"):
        assert key in metrics, key
    assert 1.0 <= metrics["turns/mean"] <= 2.0 and metrics["grad_norm"] > 0
    assert metrics["rollout/logprob_diff_max"] < 1e-3 and metrics["rollout/mismatch_kl"] < 1e-6
    cands = [c for e in events if e["event"] == "problem" for c in e["candidates"]]
    two = [c for c in cands if len(c["turns"]) == 2]
    assert two and all(c["turns"][0]["feedback"] and c["turns"][1]["code"] == c["code"] for c in two)
    evals = [e for e in events if e["event"] == "eval"]
    assert evals and all(0.0 <= e["pass@1/turn1"] <= e["pass@1"] + 1e-9 for e in evals)
    json.dumps(events)


def test_a_two_turn_run_resumed_from_its_checkpoint_matches_an_uninterrupted_one(tmp_path, tiny_model_dir,
                                                                                 train_problems_file, runner):
    import os
    import signal

    from safetensors.torch import load_file

    from tests.training.conftest import watch_and
    from training.trainer import train

    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 2},
                          sampling={"prompt_style": "chat", "turns": 2, "max_new_tokens": 8},
                          reward={"turns": "discounted"})
    assert train(cfg, tmp_path / "straight", runner=runner, progress=False) == "succeeded"
    interrupted = tmp_path / "interrupted"
    watcher = watch_and(lambda: os.kill(os.getpid(), signal.SIGTERM), interrupted / "events.jsonl", 1)
    assert train(cfg, interrupted, runner=runner, progress=False) == "cancelled"
    watcher.join()
    assert train(cfg, interrupted, resume=True, runner=runner, progress=False) == "succeeded"
    resumed = read_events(interrupted / "events.jsonl")
    restart = max(i for i, e in enumerate(resumed) if e["event"] == "start")
    assert resumed[restart]["resumed_from"] == 1
    straight = read_events(tmp_path / "straight" / "events.jsonl")
    step2 = lambda evs: next(e for e in evs if e["event"] == "step" and e["step"] == 2)["metrics"]  # noqa: E731
    a, b = step2(straight), step2(resumed[restart:])
    for key in ("reward/mean", "reward/turn1", "reward/turn2", "pass@1/turn1", "turns/mean", "loss/policy",
                "grad_norm", "entropy"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    turns = lambda evs: [[t["code"] for t in c["turns"]] for e in evs  # noqa: E731
                         if e["event"] == "problem" and e["step"] == 2 for c in e["candidates"]]
    assert turns(straight) == turns(resumed[restart:])
    wa = load_file(str(tmp_path / "straight" / "checkpoints" / "step-2" / "adapter_model.safetensors"))
    wb = load_file(str(interrupted / "checkpoints" / "step-2" / "adapter_model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_the_vllm_engine_sends_a_later_turns_exact_token_ids(tokenizer, runner, tmp_path):
    """The vLLM engine's side of the door, with the server's answers canned: turn 2's request carries the
    trajectory's token ids as its prompt, and a two-turn rollout goes through it as through the hf one."""
    from training.engines.vllm import VLLMEngine
    from training.rollout import start_rollout

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = VLLMEngine("http://127.0.0.1:9", tokenizer, eos_ids=[eos], adapter_dir=tmp_path)
    bodies = []

    def answer(path, body, raw=False):
        bodies.append(body)
        first = tokenizer.decode(body["prompt"]).count("<|im_start|>assistant") == 1
        ids = tokenizer(_reply(WRONG["add"] if first else RIGHT["add"]), add_special_tokens=False)["input_ids"]
        return {"choices": [{"token_ids": ids + [eos], "logprobs": {"token_logprobs": [-0.5] * (len(ids) + 1)}}]}

    engine._post = answer
    try:
        problems = _problems("add")
        rollout = start_rollout(engine, tokenizer, problems, _sampling(), runner, generator_seed=0).finish()
    finally:
        engine.close()
    assert [len(c.turns) for c in rollout.candidates] == [2, 2] and all(c.passed for c in rollout.candidates)
    assert len(bodies) == 4  # two trajectories x two turns, one request each
    turn2 = [b["prompt"] for b in bodies[2:]]
    row = rollout.batch.prompt_ids[0] + rollout.batch.completion_ids[0]
    assert any(row[:len(p)] == p for p in turn2)  # turn 2 continued exactly the trajectory's tokens
    assert rollout.batch.sampler_logprobs[0].count(0.0) == rollout.batch.completion_turns[0].count(-1)
