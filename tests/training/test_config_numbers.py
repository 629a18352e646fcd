"""A number no float holds as written (1e-400 and a 401-digit fraction read as 0, 1e400 as inf) is refused
naming its field, wherever the config comes from; 0 written as 0 and tiny but representable values stay."""
import json

import pytest

from training.config import ConfigError, apply_overrides, config_from_dict, json_number, load_config, yaml_load

TINY_FRACTION = "0." + "0" * 399 + "1"  # 401 digits after the point
LOST = ["1e-400", "1.0e-400", "-1.5E-999", TINY_FRACTION, "1.0e400", "1" + "0" * 400 + ".0"]
FIELDS = ["ppo.kl_coef", "sampling.temperature", "reward.weights.syntax", "ppo.weight_decay"]


def nested(dotted: str, text: str) -> str:
    """YAML for ``dotted: text`` (the literal as written)."""
    *parents, leaf = dotted.split(".")
    lines = [("  " * i) + f"{p}:" for i, p in enumerate(parents)]
    return "\n".join(lines + [("  " * len(parents)) + f"{leaf}: {text}"]) + "\n"


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("literal", LOST)
def test_a_yaml_number_no_float_holds_is_refused_naming_the_field(tmp_path, field, literal):
    path = tmp_path / "run.yaml"
    path.write_text(nested(field, literal))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.field == field
    assert "too small for a float" in e.value.message or "too large for a float" in e.value.message


@pytest.mark.parametrize("literal", LOST)
def test_a_set_override_no_float_holds_is_refused_naming_the_field(literal):
    with pytest.raises(ConfigError) as e:
        config_from_dict(apply_overrides({}, [f"ppo.kl_coef={literal}"]))
    assert e.value.field == "ppo.kl_coef"


@pytest.mark.parametrize("literal", LOST)
def test_a_json_number_no_float_holds_is_refused_naming_the_field(literal):
    data = json.loads('{"sampling": {"temperature": %s}}' % literal, parse_float=json_number)
    with pytest.raises(ConfigError) as e:
        config_from_dict(data)
    assert e.value.field == "sampling.temperature"
    assert "write 0 if you mean 0" in e.value.message or "too large" in e.value.message


def test_the_message_says_what_the_number_would_have_been_read_as():
    with pytest.raises(ConfigError) as e:
        config_from_dict(yaml_load("ppo:\n  kl_coef: 1e-400\n"))
    assert str(e.value) == ("ppo.kl_coef: 1e-400 is too small for a float and would be read as 0 (the smallest "
                            "positive one is about 5e-324); write 0 if you mean 0")


# Not a subnormal such as 5e-320: once a policy has loaded, the process flushes denormals to zero
# (training.runtime.cpu_float_mode), and then it is read as 0 and refused, as it should be there.
@pytest.mark.parametrize("literal", ["0", "0.0", "-0.0", "0e5", "0.000", "1e-300", "2.3e-308"])
def test_zero_written_as_zero_and_tiny_representable_values_are_kept(literal):
    value = float(literal)
    assert config_from_dict(yaml_load(nested("ppo.kl_coef", literal))).ppo.kl_coef == value
    data = json.loads('{"ppo": {"kl_coef": %s}}' % literal, parse_float=json_number)
    assert config_from_dict(data).ppo.kl_coef == value


def test_a_lost_number_in_a_string_field_is_not_taken_as_its_text():
    with pytest.raises(ConfigError) as e:
        config_from_dict(yaml_load("model:\n  name_or_path: 1.0e-400\n"))
    assert e.value.field == "model.name_or_path" and "got the number 1.0e-400" in e.value.message
    with pytest.raises(ConfigError) as e:
        config_from_dict(json.loads('{"sampling": {"stop": ["x", 1e-400]}}', parse_float=json_number))
    assert e.value.field == "sampling.stop"


def test_yaml_s_own_infinity_is_still_refused_as_not_finite():
    with pytest.raises(ConfigError) as e:
        config_from_dict(yaml_load("ppo:\n  kl_coef: .inf\n"))
    assert e.value.field == "ppo.kl_coef" and "finite" in e.value.message
