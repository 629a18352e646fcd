"""Run config: validation messages, YAML round trip, overrides, JSON schema."""

import dataclasses
import json
import subprocess
import sys
import typing

import pytest
import yaml

from training.config import (
    ADVANTAGE_ESTIMATORS,
    DEFAULT_COMPLETION_STOP,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    REWARD_NORMALIZATIONS,
    SECTIONS,
    ConfigError,
    LoraConfig,
    PPOConfig,
    RunConfig,
    SamplingConfig,
    ScheduleConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    field_docs,
    json_schema,
    load_config,
    save_config,
)

# (config dict, dotted field the error must name, words the message must contain)
INVALID = [
    ({"ppo": {"kl_coef": -0.1}}, "ppo.kl_coef", ">= 0"),
    ({"ppo": {"kl_coef": 2}}, "ppo.kl_coef", "recommended range 0.01-0.1"),
    ({"ppo": {"kl_estimator": "k4"}}, "ppo.kl_estimator", "k1, k2, k3"),
    ({"ppo": {"clip_range": 3}}, "ppo.clip_range", "< 1.0"),
    ({"ppo": {"clip_range": 0}}, "ppo.clip_range", "> 0"),
    ({"ppo": {"clip_range": 0.2, "clip_range_high": 0.15}}, "ppo.clip_range_high", "greater than clip_range"),
    ({"ppo": {"dual_clip": 0.5}}, "ppo.dual_clip", "> 1"),
    ({"ppo": {"advantage": "grp"}}, "ppo.advantage", "did you mean 'grpo'"),
    ({"ppo": {"loss_aggregation": "sum"}}, "ppo.loss_aggregation", "token_mean, seq_mean"),
    ({"ppo": {"learning_rate": 0}}, "ppo.learning_rate", "> 0"),
    ({"ppo": {"learning_rate": "fast"}}, "ppo.learning_rate", "must be a number"),
    ({"ppo": {"epochs_per_batch": 0}}, "ppo.epochs_per_batch", ">= 1"),
    ({"ppo": {"micro_batch_size": 0}}, "ppo.micro_batch_size", ">= 1"),
    ({"ppo": {"minibatch_size": 1000}}, "ppo.minibatch_size", "only has 128 candidates"),
    ({"ppo": {"max_grad_norm": -1}}, "ppo.max_grad_norm", "> 0"),
    ({"ppo": {"clip_rnge": 0.1}}, "ppo.clip_rnge", "did you mean 'clip_range'"),
    ({"sampling": {"candidates_per_problem": 1}}, "sampling.candidates_per_problem", "no baseline"),
    ({"sampling": {"problems_per_step": 0}}, "sampling.problems_per_step", ">= 1"),
    ({"sampling": {"max_new_tokens": 0}}, "sampling.max_new_tokens", ">= 1"),
    ({"sampling": {"temperature": -1}}, "sampling.temperature", ">= 0"),
    ({"sampling": {"top_p": 0}}, "sampling.top_p", "> 0"),
    ({"sampling": {"top_p": 1.5}}, "sampling.top_p", "<= 1"),
    ({"sampling": {"top_k": -1}}, "sampling.top_k", ">= 0"),
    ({"sampling": {"prompt_style": "instruct"}}, "sampling.prompt_style", "completion, chat"),
    ({"sampling": {"stop": "\n\n"}}, "sampling.stop", "list of strings"),
    ({"sampling": {"stop": ["ok", ""]}}, "sampling.stop", "empty string"),
    ({"sampling": {"stop": [1]}}, "sampling.stop", "list of strings"),
    ({"model": {"dtype": "float64"}}, "model.dtype", "float32, bfloat16, float16, auto"),
    ({"model": {"name_or_path": " "}}, "model.name_or_path", "must not be empty"),
    ({"model": {"lora": {"r": 0}}}, "model.lora.r", ">= 1"),
    ({"model": {"lora": {"dropout": 1.0}}}, "model.lora.dropout", "< 1.0"),
    ({"model": {"lora": {"target_modules": []}}}, "model.lora.target_modules", "empty"),
    ({"model": {"lora": 3}}, "model.lora", "mapping"),
    ({"model": {"gradient_checkpointing": "yes"}}, "model.gradient_checkpointing", "true or false"),
    ({"reward": {"weights": {"pass_rate": -0.1}}}, "reward.weights.pass_rate", ">= 0"),
    ({"reward": {"weights": {"pass_rate": 0, "syntax": 0, "efficiency": 0, "conciseness": 0, "format": 0}}},
     "reward.weights", "all zero"),
    ({"reward": {"weights": {"speed": 1}}}, "reward.weights.speed", "valid keys"),
    ({"reward": {"repeats": 0}}, "reward.repeats", ">= 1"),
    ({"reward": {"clip": 0}}, "reward.clip", "> 0"),
    ({"reward": {"normalize": "zscore"}}, "reward.normalize", "sum, per_component"),
    ({"reward": {"normalize": "per_component", "turns": "discounted"},
      "sampling": {"turns": 2, "prompt_style": "chat"}},
     "reward.normalize", "use reward.turns: final, or reward.normalize: sum"),
    ({"schedule": {"warmup": "linear"}}, "schedule.warmup", "none, stable_then_fast"),
    ({"schedule": {"warmup_steps": -1}}, "schedule.warmup_steps", ">= 0"),
    ({"schedule": {"kl_start_factor": 0.5}}, "schedule.kl_start_factor", ">= 1.0"),
    ({"train": {"steps": 0}}, "train.steps", ">= 1"),
    ({"train": {"steps": True}}, "train.steps", "integer"),
    ({"train": {"steps": 2.5}}, "train.steps", "integer"),
    ({"train": {"eval_samples": 0}}, "train.eval_samples", ">= 1"),
    ({"train": {"seed": -1}}, "train.seed", ">= 0"),
    ({"sandbox": {"workers": 0}}, "sandbox.workers", ">= 1"),
    ({"sandbox": {"timeout_s": 0}}, "sandbox.timeout_s", "> 0"),
    ({"sandbox": {"memory_mb": 1}}, "sandbox.memory_mb", ">= 16"),
    ({"sandbox": {"mode": "hot"}}, "sandbox.mode", "warm, cold"),
    ({"sandbox": {"backend": "nope"}}, "sandbox.backend", "docker, process"),
    ({"sampling": {"staleness": 2, "engine": "vllm"}}, "sampling.staleness", "<= 1"),
    ({"sampling": {"staleness": 1}}, "sampling.staleness", "set engine: vllm or staleness: 0"),
    ({"sampling": {"staleness": 1, "engine": "vllm", "dynamic": True}}, "sampling.staleness",
     "set dynamic: false or staleness: 0"),
    ({"problems": ""}, "problems", "must not be empty"),
    ({"optimizer": {}}, "optimizer", "valid keys: model, problems"),
    ({"ppo": [1, 2]}, "ppo", "mapping"),
]


@pytest.mark.parametrize("data,field,words", INVALID, ids=[f for _, f, _ in INVALID])
def test_every_invalid_config_is_rejected_with_a_message_naming_the_field(data, field, words):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")
    assert words in str(info.value)


def test_defaults_match_the_documented_values():
    cfg = RunConfig()
    assert cfg.sampling.candidates_per_problem == 8
    assert cfg.sampling.top_k == 0
    assert (cfg.ppo.kl_coef, cfg.ppo.kl_estimator, cfg.ppo.clip_range) == (0.04, "k3", 0.2)
    assert cfg.reward.weights.as_dict() == {"pass_rate": 0.6, "syntax": 0.15, "efficiency": 0.1,
                                            "conciseness": 0.05, "format": 0.1}
    assert cfg.ppo.advantage in ADVANTAGE_ESTIMATORS


def test_the_design_example_yaml_loads(tmp_path):
    text = """
model:
  name_or_path: var/models/tiny
  dtype: float32
  lora: {r: 8, alpha: 16, dropout: 0.0, target_modules: all-linear}
problems: data/demo/problems.jsonl
sampling: {problems_per_step: 16, candidates_per_problem: 8, max_new_tokens: 128,
           temperature: 1.0, top_p: 1.0, top_k: 0, prompt_style: completion,
           stop: ["\\ndef ", "\\nclass ", "\\nif __name__", "\\nprint(", "\\n#"]}
reward:
  weights: {pass_rate: 0.6, syntax: 0.15, efficiency: 0.1, conciseness: 0.05, format: 0.1}
ppo: {learning_rate: 2.0e-6, kl_coef: 0.04, kl_estimator: k3, clip_range: 0.2,
      clip_range_high: null, epochs_per_batch: 1, minibatch_size: null, micro_batch_size: 32,
      max_grad_norm: 1.0, advantage: grpo, loss_aggregation: token_mean}
train: {steps: 60, seed: 0, eval_every: 10, eval_samples: 8, checkpoint_every: 20}
sandbox: {backend: process, workers: 2, timeout_s: null, memory_mb: null}
"""
    path = tmp_path / "run.yaml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.sampling.stop == DEFAULT_COMPLETION_STOP
    assert cfg.model.lora == LoraConfig()
    assert cfg.ppo.learning_rate == 2e-6


def test_a_yaml_round_trip_gives_an_equal_config(tmp_path):
    cfg = config_from_dict({"model": {"lora": None, "dtype": "bfloat16"},
                            "sampling": {"stop": ["\n\n"], "prompt_style": "chat", "top_k": 20},
                            "ppo": {"clip_range_high": 0.28, "advantage": "rloo", "minibatch_size": 32},
                            "schedule": {"warmup": "stable_then_fast", "kl_warmup_steps": 4}})
    path = tmp_path / "saved.yaml"
    save_config(cfg, path)
    assert load_config(path) == cfg
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg


def test_numbers_written_without_a_dot_are_read_as_numbers(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("ppo:\n  learning_rate: 1e-5\n")  # PyYAML reads this as the string "1e-5"
    assert load_config(path).ppo.learning_rate == 1e-5


def test_reward_normalize_defaults_to_sum_and_takes_per_component():
    assert (RunConfig().reward.normalize, RunConfig().reward.weighted_mean) == ("sum", True)
    cfg = config_from_dict({"reward": {"normalize": "per_component"}})
    assert cfg.reward.normalize == "per_component"
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg
    # multi-turn with final credit normalizes the trajectories' (last turns') dimensions: allowed
    assert config_from_dict({"reward": {"normalize": "per_component"},
                             "sampling": {"turns": 2, "prompt_style": "chat"}})


@pytest.mark.parametrize("legacy", [True, False])
def test_a_saved_config_with_the_old_boolean_normalize_still_loads(legacy):
    # reward.normalize was "divide by the sum of weights" before it took sum | per_component
    cfg = config_from_dict({"reward": {"normalize": legacy}})
    assert (cfg.reward.normalize, cfg.reward.weighted_mean) == ("sum", legacy)
    # the web app merges a request over the defaults (weighted_mean: true): the old spelling still decides
    assert config_from_dict({"reward": {"normalize": legacy, "weighted_mean": True}}) == cfg


def test_stop_defaults_depend_on_the_prompt_style():
    assert SamplingConfig().stop_strings == DEFAULT_COMPLETION_STOP
    assert SamplingConfig(prompt_style="chat").stop_strings == ()
    assert SamplingConfig(prompt_style="chat", stop=["```"]).stop_strings == ("```",)
    # null stays null so that a later change of prompt_style still gets the right default
    assert config_to_dict(RunConfig())["sampling"]["stop"] is None


def test_overrides_set_nested_values_parsed_as_yaml():
    data = apply_overrides({"ppo": {"clip_range": 0.1}}, [
        "ppo.learning_rate=1e-5", "model.lora=null", 'sampling.stop=["\\n\\n"]', "train.steps=3"])
    cfg = config_from_dict(data)
    assert cfg.ppo.learning_rate == 1e-5 and cfg.ppo.clip_range == 0.1
    assert cfg.model.lora is None
    assert cfg.sampling.stop == ("\n\n",)
    assert cfg.train.steps == 3


def test_an_override_through_a_null_section_recreates_it():
    data = apply_overrides({"model": {"lora": None}}, ["model.lora.r=16"])
    assert config_from_dict(data).model.lora == LoraConfig(r=16)


def test_an_override_without_equals_sign_is_rejected():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides({}, ["ppo.learning_rate"])


def test_an_override_of_an_unknown_key_names_it():
    with pytest.raises(ConfigError) as info:
        config_from_dict(apply_overrides({}, ["ppo.lr=1"]))
    assert info.value.field == "ppo.lr"


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")


def test_broken_yaml_reports_the_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("ppo:\n  clip_range: 0.2\n bad: [\n")
    with pytest.raises(ConfigError, match="line 3"):
        load_config(path)


def test_the_schema_contains_every_field_with_type_default_and_description():
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"

    def walk(cls, node, path):
        props = node["properties"]
        assert set(props) == {f.name for f in dataclasses.fields(cls)}, path
        assert node["additionalProperties"] is False
        for f in dataclasses.fields(cls):
            prop = props[f.name]
            assert prop["description"], f"{path}.{f.name} has no description"
            assert prop["description"] == field_docs()[cls.__name__][f.name]
            assert "default" in prop and ("type" in prop or "anyOf" in prop)
            sub = prop if prop.get("type") == "object" else next(
                (b for b in prop.get("anyOf", []) if b.get("type") == "object"), None)
            if sub is not None:  # the section's class from the field's type (a nullable one may default to null)
                tp = typing.get_type_hints(cls)[f.name]
                walk(next(a for a in typing.get_args(tp) or (tp,) if dataclasses.is_dataclass(a)), sub,
                     f"{path}.{f.name}")

    walk(RunConfig, schema, "")
    ppo = schema["properties"]["ppo"]["properties"]
    assert ppo["advantage"]["enum"] == list(ADVANTAGE_ESTIMATORS)
    assert ppo["clip_range"]["exclusiveMaximum"] == 1.0 and ppo["clip_range"]["default"] == 0.2
    assert ppo["kl_coef"]["x-recommended"] == {"minimum": 0.01, "maximum": 0.1}
    assert ppo["clip_range_high"]["type"] == ["number", "null"]
    assert schema["properties"]["sampling"]["properties"]["stop"]["anyOf"][1] == {"type": "null"}


def test_schema_defaults_build_the_default_config():
    schema = json_schema()

    def defaults(node):
        return {k: v["default"] for k, v in node["properties"].items()}

    assert config_from_dict(defaults(schema)) == RunConfig()
    json.dumps(schema)  # serialisable as is


def test_every_section_field_has_a_docstring():
    docs = field_docs()
    for cls in SECTIONS:
        missing = [f.name for f in dataclasses.fields(cls) if not docs.get(cls.__name__, {}).get(f.name)]
        assert not missing, f"{cls.__name__} fields without docstring: {missing}"


def test_sections_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PPOConfig().clip_range = 0.3


def test_stable_then_fast_warms_up_lr_and_eases_kl():
    s = ScheduleConfig(warmup="stable_then_fast", warmup_steps=4, lr_start_factor=0.2, kl_start_factor=3.0)
    assert [round(s.lr_factor(i, 10), 3) for i in range(6)] == [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]
    assert [round(s.kl_factor(i), 3) for i in range(6)] == [3.0, 2.5, 2.0, 1.5, 1.0, 1.0]
    none = ScheduleConfig()
    assert none.lr_factor(0, 10) == 1.0 and none.kl_factor(0) == 1.0


def test_lr_decay_reaches_the_minimum_at_the_last_step():
    for decay in ("linear", "cosine"):
        s = ScheduleConfig(lr_decay=decay, min_lr_factor=0.1)
        assert s.lr_factor(0, 11) == pytest.approx(1.0)
        assert s.lr_factor(10, 11) == pytest.approx(0.1)
        assert 0.1 < s.lr_factor(5, 11) < 1.0


def test_importing_the_config_does_not_import_torch():
    code = "import sys, training.config; assert 'torch' not in sys.modules and 'django' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_config_s_choices_are_exactly_the_names_the_registries_hold():
    # The config repeats the registries' names so that it imports no torch; this keeps the copies honest.
    import torch

    from training import advantages, losses

    assert sorted(ADVANTAGE_ESTIMATORS) == sorted(advantages.ADVANTAGES)
    assert sorted(KL_ESTIMATORS) == sorted(losses.KL_ESTIMATORS)
    assert sorted(REWARD_NORMALIZATIONS) == sorted(advantages.REWARD_NORMALIZATIONS)
    values, mask = torch.ones(2, 3), torch.ones(2, 3)  # (B, T)
    for mode in LOSS_AGGREGATIONS:
        assert losses.aggregate(values, mask, mode).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="valid: " + ", ".join(LOSS_AGGREGATIONS)):
        losses.aggregate(values, mask, "sum")


def test_yaml_dump_of_defaults_is_plain():
    text = yaml.safe_dump(config_to_dict(RunConfig()))
    assert "!!python" not in text


def test_every_integer_field_has_an_upper_bound_that_fits_an_int4_column():
    from training.config import INT32_MAX, leaf_fields

    for name, f in leaf_fields().items():
        schema_type = f.type if isinstance(f.type, str) else str(f.type)
        if "int" in schema_type:
            assert "le" in f.metadata or "lt" in f.metadata, f"{name} has no upper bound"
            assert f.metadata.get("le", f.metadata.get("lt")) <= INT32_MAX, name


def test_a_group_of_one_candidate_is_refused_by_the_fields_own_bound_with_the_reason():
    with pytest.raises(ConfigError) as info:
        SamplingConfig(candidates_per_problem=1)  # no cross-section rule needed: the bound says it
    assert info.value.field == "candidates_per_problem"
    assert str(info.value) == ("candidates_per_problem: must be >= 2 and <= 1024; got 1: a group of one candidate "
                               "has no baseline, so every advantage is zero and nothing is learned "
                               "(recommended range 4-16)")
    with pytest.raises(ConfigError) as info:
        SamplingConfig(candidates_per_problem=2000)
    assert "baseline" not in str(info.value)  # the reason explains the minimum only
    candidates = json_schema()["properties"]["sampling"]["properties"]["candidates_per_problem"]
    assert candidates["minimum"] == 2 and "no baseline" in candidates["x-below-minimum"]


def test_a_huge_step_count_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"train": {"steps": 2**63}})
    assert info.value.field == "train.steps" and "<= 1000000" in str(info.value)


def test_ceilings_lower_the_bounds_in_validation_and_schema():
    from training.config import check_ceilings

    cfg = config_from_dict({"train": {"steps": 100}, "model": {"lora": None}})
    check_ceilings(cfg, {"train.steps": 100, "model.lora.r": 4})  # a null section has nothing to bound
    with pytest.raises(ConfigError) as info:
        check_ceilings(cfg, {"train.steps": 99})
    assert info.value.field == "train.steps" and "<= 99" in str(info.value)
    with pytest.raises(KeyError):
        check_ceilings(cfg, {"train.stepz": 1})
    schema = json_schema({"train.steps": 99, "model.lora.r": 4, "sandbox.memory_mb": 1024})
    assert schema["properties"]["train"]["properties"]["steps"]["maximum"] == 99
    assert schema["properties"]["sandbox"]["properties"]["memory_mb"]["maximum"] == 1024
    lora = next(b for b in schema["properties"]["model"]["properties"]["lora"]["anyOf"] if b.get("type") == "object")
    assert lora["properties"]["r"]["maximum"] == 4
    assert json_schema({"train.steps": 10**9})["properties"]["train"]["properties"]["steps"]["maximum"] == 1_000_000


# ---- odd values (issue 23): each a ConfigError naming the field, never another exception ----------


def test_an_integer_too_large_for_a_float_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as e:
        config_from_dict({"ppo": {"learning_rate": 10**400}})
    assert e.value.field == "ppo.learning_rate" and "401 digits" in e.value.message


@pytest.mark.parametrize("config,field", [
    ({"run_name_is_not_a_key": 1, "model": {"name_or_path": "a\ud800b"}}, "run_name_is_not_a_key"),
    ({"model": {"name_or_path": "a\ud800b"}}, "model.name_or_path"),
    ({"sampling": {"stop": ["ok", "x\udfffy"]}}, "sampling.stop"),
    ({"model": {"lora": {"target_modules": ["q_proj", "\ud800"]}}}, "model.lora.target_modules"),
])
def test_a_lone_surrogate_is_refused_naming_the_field(config, field):
    with pytest.raises(ConfigError) as e:
        config_from_dict(config)
    assert e.value.field == field
    if field != "run_name_is_not_a_key":
        assert "lone surrogate" in e.value.message


@pytest.mark.parametrize("overrides,field,words", [
    ({"sampling": {"stop": ["s%d" % i for i in range(100_000)]}}, "sampling.stop", "at most 64 entries"),
    ({"sampling": {"stop": ["x" * 257]}}, "sampling.stop", "at most 256 characters"),
    ({"reward": {"weights": {"pass_rate": 1e308}}}, "reward.weights.pass_rate", "<= 1000.0"),
    ({"model": {"name_or_path": "m" * 4097}}, "model.name_or_path", "at most 4096 characters"),
    ({"model": {"adapters": ["a"] * 65}}, "model.adapters", "at most 64 entries"),
    ({"sandbox": {"backend": "b" * 65}}, "sandbox.backend", "at most 64 characters"),
])
def test_lists_strings_and_weights_have_bounds(overrides, field, words):
    with pytest.raises(ConfigError) as e:
        config_from_dict(overrides)
    assert e.value.field == field and words in e.value.message


def test_the_schema_carries_the_length_bounds_the_validation_applies():
    props = json_schema()["properties"]
    stop = props["sampling"]["properties"]["stop"]["anyOf"][0]
    assert stop["maxItems"] == 64 and stop["items"]["maxLength"] == 256
    assert props["model"]["properties"]["name_or_path"]["maxLength"] == 4096
    assert props["reward"]["properties"]["weights"]["properties"]["pass_rate"]["maximum"] == 1000.0
    assert config_from_dict({"sampling": {"stop": ["s"] * 64}}).sampling.stop == ("s",) * 64
