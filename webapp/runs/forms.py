"""The new-run form, generated from ``training.config.json_schema()`` (defaults, bounds, choices, help).

Field names are the dotted config keys (``ppo.clip_range``), so a ``ConfigError`` from the training
config lands on the field it names. A nullable section (``model.lora``) gets a checkbox.
"""
from __future__ import annotations

import functools
import json
from typing import Any

from django import forms
from django.conf import settings

from training.config import (TURNS_NEED_CHAT, ConfigError, LostNumber, json_number, json_schema,
                             lost_number_message)

from webapp.core.refusals import add_refusal
from webapp.core.text import name_problem
from webapp.problems.models import ProblemSet

from .config import validate_config
from .engines import engine_offers
from .model_refs import WEB_DEFAULT_MODEL

TRACKING_GROUP = "Experiment trackers (TensorBoard, W&B, MLflow)"
GROUPS = [  # (title, dotted prefix); the longest matching prefix wins
    ("Model", "model"), ("LoRA", "model.lora"), ("Sampling", "sampling"), ("Reward weights", "reward.weights"),
    ("Reward", "reward"), ("Truncated replies (reward.overlong)", "reward.overlong"), ("PPO", "ppo"), ("Schedule", "schedule"), ("Train", "train"), ("Sandbox", "sandbox"),
    ("vLLM server (when sampling.engine is vllm)", "vllm"),
    ("Difficulty filter (the problem set's latest difficulty probe)", "difficulty"),
    ("Repair feedback (what the model is told after a failing turn, sampling.turns > 1)", "feedback"),
    (TRACKING_GROUP, "tracking"),
    ("Divergence warnings (a run past these bounds is warned about and goes on)", "monitor"),
]
WEB_DEFAULTS = {"model.name_or_path": WEB_DEFAULT_MODEL}  # the training default is a CLI path, not a web name
# From the problem set; from model.name_or_path (run:<id>/step-<n>); the set's latest finished probe.
SKIP = {"problems", "model.adapters", "difficulty.probe"}


def _group_of(name: str) -> str:
    best = max((p for _, p in GROUPS if name == p or name.startswith(p + ".")), key=len)
    return next(title for title, p in GROUPS if p == best)


def _bounds_text(s: dict) -> str:
    parts = []
    for key, sym in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in s:
            parts.append(f"{sym} {s[key]}")
    return ", ".join(parts)


class ListOrStringField(forms.CharField):
    """A list of strings as JSON (``["\\ndef ", "\\nclass "]``); for ``target_modules`` a bare string too."""

    def __init__(self, *, allow_string: bool, nullable: bool, empty: list | None = None, **kwargs):
        self.allow_string, self.nullable, self.empty = allow_string, nullable, empty
        super().__init__(**kwargs)

    def prepare_value(self, value):
        if isinstance(value, (list, tuple)):
            return json.dumps(list(value))
        return "" if value is None else value

    def to_python(self, value):
        text = (value or "").strip()
        if not text:
            if self.nullable:
                return None
            if self.empty is not None:
                return list(self.empty)
            raise forms.ValidationError("required")
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError as exc:
                raise forms.ValidationError(f"not a JSON list of strings: {exc}") from None
            except RecursionError:  # "[[[[..." tens of thousands deep
                raise forms.ValidationError("is nested too deeply: give a flat JSON list of strings such as "
                                            '["\\n\\n"]') from None
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise forms.ValidationError('must be a JSON list of strings, e.g. ["q_proj", "v_proj"]')
            return items
        if self.allow_string:
            return text
        raise forms.ValidationError('must be a JSON list of strings such as ["\\n\\n"], or empty for the default')


def _bounds_validator(schema: dict):
    """Checks the schema's bounds on the form field itself, so every out-of-range field is marked at once
    (the config validation behind it stops at the first bad field); the message matches the config's."""
    checks = [(key, sym, schema[key]) for key, sym in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                       ("maximum", "<="), ("exclusiveMaximum", "<")) if key in schema]
    ops = {">=": lambda v, b: v >= b, ">": lambda v, b: v > b, "<=": lambda v, b: v <= b, "<": lambda v, b: v < b}
    text = " and ".join(f"{sym} {bound}" for _, sym, bound in checks)

    def validate(value):
        failed = {key for key, sym, bound in checks if value is not None and not ops[sym](value, bound)}
        if failed:
            # Why a value under the minimum cannot work, in the config's words (its field's `below`).
            why = schema.get("x-below-minimum") if failed & {"minimum", "exclusiveMinimum"} else None
            raise forms.ValidationError(f"must be {text}; got {value!r}" + (f": {why}" if why else ""))
    return validate


def _leaf_field(schema: dict, label: str) -> forms.Field:
    validators = [_bounds_validator(schema)] if _bounds_text(schema) else []
    help_text = schema.get("description", "")
    bounds = _bounds_text(schema)
    if bounds:
        help_text += f" ({bounds})"
    common = {"label": label, "help_text": help_text}
    types = schema.get("type")
    nullable = isinstance(types, list) and "null" in types
    base = [t for t in types if t != "null"][0] if isinstance(types, list) else types
    if "anyOf" in schema:  # lists of strings (stop, target_modules)
        branches = [b.get("type") for b in schema["anyOf"]]
        return ListOrStringField(allow_string="string" in branches, nullable="null" in branches, required=False,
                                 **common)
    if base == "array":  # a list that may be empty (reward.penalize_flags); the config checks its items
        if "enum" in schema.get("items", {}):
            common["help_text"] += f" (any of: {', '.join(schema['items']['enum'])})"
        return ListOrStringField(allow_string=False, nullable=False, empty=[], required=False, **common)
    if "enum" in schema:
        return forms.ChoiceField(choices=[(c, c) for c in schema["enum"]], **common)
    if base == "boolean":
        return forms.BooleanField(required=False, **common)
    # The browser refuses out-of-range numbers before the form is sent (run_new.js); HTML min/max are
    # inclusive, so an exclusive bound on a float also travels as data-exclusive-min/max.
    attrs: dict[str, Any] = {}
    if "minimum" in schema:
        attrs["min"] = schema["minimum"]
    elif "exclusiveMinimum" in schema:
        attrs["min"] = schema["exclusiveMinimum"] + 1 if base == "integer" else schema["exclusiveMinimum"]
        if base != "integer":
            attrs["data-exclusive-min"] = "true"
    if "maximum" in schema:
        attrs["max"] = schema["maximum"]
    elif "exclusiveMaximum" in schema:
        attrs["max"] = schema["exclusiveMaximum"] - 1 if base == "integer" else schema["exclusiveMaximum"]
        if base != "integer":
            attrs["data-exclusive-max"] = "true"
    if "x-below-minimum" in schema:
        attrs["data-below-minimum"] = schema["x-below-minimum"]
    if nullable:
        attrs["placeholder"] = "null"  # what an empty field means, as the help text says "null = ..."
    if base == "integer":
        return forms.IntegerField(required=not nullable, widget=forms.NumberInput(attrs=attrs), validators=validators,
                                  **common)
    if base == "number":
        return ExactFloatField(required=not nullable, widget=forms.NumberInput(attrs={**attrs, "step": "any"}),
                                validators=validators, **common)
    return forms.CharField(required=not nullable, max_length=schema.get("maxLength"),
                           empty_value=None if nullable else "", **common)


class ExactFloatField(forms.FloatField):
    """A float field that refuses a number no float holds as written (``1e-400`` would be 0, ``1e400``
    inf), as the run config does (``training.config.json_number``)."""

    def to_python(self, value):
        if isinstance(value, str) and value.strip():
            try:
                number = json_number(value.strip())
            except ValueError:
                number = None  # not a plain number: Django's own message
            if isinstance(number, LostNumber):
                raise forms.ValidationError(lost_number_message(number), code="invalid")
        return super().to_python(value)


def config_fields(schema: dict | None = None, prefix: str = "") -> list[tuple[str, forms.Field, Any]]:
    """[(dotted name, field, default)] for every leaf of the config schema (and nullable sections)."""
    schema = schema or json_schema(settings.CONFIG_CEILINGS)
    out = []
    for key, s in schema["properties"].items():
        name = f"{prefix}{key}"
        if name in SKIP:
            continue
        if s.get("type") == "object":
            out += config_fields(s, name + ".")
            continue
        obj = next((b for b in s.get("anyOf", []) if b.get("type") == "object"), None)
        if obj is not None:  # a section that may be null: a checkbox, then its fields
            switch = forms.BooleanField(required=False, label=f"use {s.get('title', key)}",
                                        help_text=s.get("description", ""))
            switch.is_section = True
            out.append((name, switch, s.get("default") is not None))
            inner = config_fields(obj, name + ".")
            for _, field, _ in inner:  # a switched-off section's fields may be empty; the config checks them when on
                field.required = False
            out += inner
            continue
        out.append((name, _leaf_field(s, s.get("title", key)), s.get("default")))
    return out


@functools.cache
def nullable_sections() -> frozenset[str]:
    return frozenset(name for name, field, _ in config_fields() if getattr(field, "is_section", False))


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"ppo": {"clip_range": 0.2}} -> {"ppo.clip_range": 0.2}; a null section -> {"model.lora": False}."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out[name] = True  # a section switch, where the form has one
            out.update(flatten(value, name + "."))
        elif value is None and name in nullable_sections():
            out[name] = False
        else:
            out[name] = value
    return out


class RunForm(forms.Form):
    tracking_group = TRACKING_GROUP
    name = forms.CharField(max_length=200, help_text="A name to find the run by.")
    problem_set = forms.ModelChoiceField(queryset=None, help_text="Problems to train on (train split) and "
                                                                  "evaluate on (heldout split).")

    def __init__(self, *args, user, initial_config: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["problem_set"].queryset = ProblemSet.objects.visible_to(user).order_by("-created")
        self.fields["problem_set"].label_from_instance = set_label
        initial = flatten(initial_config or {})
        self.sections = set()
        self.defaults = {}
        for name, field, default in config_fields():
            default = WEB_DEFAULTS.get(name, default)
            self.fields[name] = field
            self.defaults[name] = default
            self.initial.setdefault(name, initial.get(name, default))
            if getattr(field, "is_section", False):
                self.sections.add(name)
        self._mark_engines()
        self._mark_turns()
        self.config: dict | None = None

    def _mark_turns(self) -> None:
        """``sampling.turns`` > 1 needs chat prompts: the config's own refusal (``TURNS_NEED_CHAT``) travels with the
        field, so run_new.js says it in the same words as soon as turns or prompt_style changes."""
        field = self.fields.get("sampling.turns")
        if field is not None:
            field.widget.attrs["data-needs-chat"] = TURNS_NEED_CHAT
            field.help_text += (" Repair needs a model that can follow feedback (it answers a chat prompt with code "
                                "and fixes it when told why it failed); the demo's tiny models, warmed on completion "
                                "prompts, cannot: their repair runs learn nothing (README “Multi-turn repair”).")

    def _mark_engines(self) -> None:
        """An engine this server cannot start says so in its option and beside the field (it stays a choice:
        a preset may name it, and with ``vllm.url`` a listed server needs no engine environment)."""
        field = self.fields.get("sampling.engine")
        if field is None:
            return
        missing = {o["name"]: o["reason"] for o in engine_offers() if not o["available"]}
        field.choices = [(value, f"{label} (not installed here)" if value in missing else label)
                         for value, label in field.choices]
        field.warnings = [f"{name}: {reason}" for name, reason in missing.items()]
        field.widget.attrs["data-unavailable"] = " ".join(missing)

    def error_links(self) -> list[tuple[str, str]]:
        """``[(field id, "Group: label")]`` for each field in error, in the page's order (the Run card, then the
        groups), for the error banner's links."""
        titles = ["Run"] + [title for title, _ in GROUPS]
        order = list(self.fields)
        named = [(titles.index(_group_of(name) if "." in name else "Run"), order.index(name), name)
                 for name in self.errors if name in self.fields]
        return [(self[name].id_for_label, f"{titles[group]}: {self[name].label}") for group, _, name in sorted(named)]

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        problem = name_problem(name)
        if problem:
            raise forms.ValidationError(problem)
        return name

    def launch_warnings(self) -> list[str]:
        """What a valid form would launch silently but probably not as meant (asked to confirm first)."""
        if self.config is None or not self.cleaned_data.get("problem_set"):
            return []
        return set_warnings(self.cleaned_data["problem_set"], self.config["sampling"]["problems_per_step"])

    def groups(self) -> list[tuple[str, list]]:
        grouped: dict[str, list] = {title: [] for title, _ in GROUPS}
        for name in self.fields:
            if "." in name:
                grouped[_group_of(name)].append(self[name])
        return [(title, fields) for title, fields in grouped.items() if fields]

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        config: dict = {}
        for name in self.fields:
            if "." not in name:
                continue
            if any(name.startswith(section + ".") for section in self.sections if not cleaned.get(section)):
                continue  # fields of a switched-off section
            if name in self.sections:
                if not cleaned.get(name):
                    _set(config, name, None)
                continue
            _set(config, name, cleaned.get(name))
        try:
            self.config = validate_config(config, self.user)
        except ConfigError as exc:
            add_refusal(self, exc)
        return cleaned


def set_label(ps) -> str:
    """The set as the dropdown lists it: counts, and what is wrong with it for training."""
    label = (f"{ps.name}: {ps.problem_count} problem{'s' if ps.problem_count != 1 else ''} "
             f"({ps.train_count} train / {ps.heldout_count} held-out)")
    issues = set_warnings(ps, problems_per_step=None, short=True)
    return label + (" ⚠ " + ", ".join(issues) if issues else "")


def set_warnings(ps, problems_per_step: int | None, *, short: bool = False) -> list[str]:
    """Why training on ``ps`` would not do what its user expects (empty when nothing is off)."""
    out = []
    if ps.heldout_count == 0:
        out.append("no held-out problems" if short else
                   "This set has no held-out problems: the run cannot measure held-out pass@1 before and after "
                   "training. Choose a held-out share on the set's page, or give some problems "
                   "\"split\": \"heldout\" in the file.")
    failing = ps.failing_in_use  # excluded problems are left out of runs
    if failing:
        out.append(f"{failing} failing validation" if short else
                   f"{failing} problem{'s' if failing != 1 else ''} of this set failed validation (the "
                   "reference solution fails or an empty one passes): their rewards do not measure correct "
                   "code. Exclude them on the set's page, or fix them in the file.")
    if problems_per_step is not None and ps.train_count < problems_per_step:
        out.append(f"only {ps.train_count} train problems for problems_per_step {problems_per_step}" if short else
                   f"This set has only {ps.train_count} train problem{'s' if ps.train_count != 1 else ''} but "
                   f"problems_per_step is {problems_per_step}: each step trains on {ps.train_count}, "
                   "a smaller batch than configured.")
    return out


def sets_issues(sets, problems_per_step: int | None) -> dict[int, list[str]]:
    """``{set id: short warnings}`` for the new-run form's launch bar and its choice of a usable set
    (``GET /runs/new/set-issues``): what ``set_warnings`` says of each set at that problems_per_step."""
    return {ps.pk: set_warnings(ps, problems_per_step, short=True) for ps in sets}


def _set(config: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
