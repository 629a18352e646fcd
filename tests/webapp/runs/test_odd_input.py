"""No input answers 500 (issue 23, finding 2): whole classes of odd values, not single cases.

Every path-like string field gets very long values, every float field a huge integer, every string
field (and every list of strings) a lone surrogate; the form gets deep nesting; names get control
characters. Each is a 400 (or a form error) naming the field it was sent in.
"""
import json
import logging

import pytest
from django.test import Client

from training.config import leaf_fields
from training.config_schema import hints as _hints, union_args as _union_args
from webapp.runs.models import Run

from tests.factories import TINY_OVERRIDES, form_data, problem_lines

SURROGATE = "a\ud800b"
LONG_VALUES = ["a" * 5000, "models/" + "a" * 5000, "models/" + "a" * 300, "models/" + "/".join(["a"] * 2000),
               "org/" + "a" * 5000, "run:1/step-" + "9" * 5000]


def _kinds(dotted: str) -> set[type]:
    """The leaf field's value types: str, float, int, bool, tuple (a list of strings)."""
    section, name = dotted.rsplit(".", 1) if "." in dotted else ("", dotted)
    from training import config as c

    cls = c.RunConfig
    for part in section.split(".") if section else []:
        tp = _hints(cls)[part]
        cls = next(a for a in (_union_args(tp) or (tp,)) if hasattr(a, "__dataclass_fields__"))
    tp = _hints(cls)[name]
    out = set()
    for a in _union_args(tp) or (tp,):
        out.add(tuple if getattr(a, "__origin__", None) is tuple else a)
    return out


STRING_FIELDS = [f for f in leaf_fields() if str in _kinds(f)]
STRING_LIST_FIELDS = [f for f in leaf_fields() if tuple in _kinds(f)]
FLOAT_FIELDS = [f for f in leaf_fields() if float in _kinds(f)]


def nested(dotted: str, value) -> dict:
    *parents, leaf = dotted.split(".")
    out = {leaf: value}
    for p in reversed(parents):
        out = {p: out}
    return out


@pytest.fixture
def api(user):
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def post_run(api, problem_set, config, name="odd"):
    return api.post("/api/runs", {"name": name, "problem_set": problem_set.pk, "config": config},
                    content_type="application/json")


def test_the_fields_under_test_are_found():
    assert "model.name_or_path" in STRING_FIELDS and "sandbox.backend" in STRING_FIELDS
    assert "sampling.stop" in STRING_LIST_FIELDS and "model.lora.target_modules" in STRING_LIST_FIELDS
    assert "ppo.learning_rate" in FLOAT_FIELDS and "reward.weights.pass_rate" in FLOAT_FIELDS


@pytest.mark.django_db
def test_very_long_strings_in_every_string_field_are_a_400_naming_it(api, problem_set):
    failures = []
    for field in STRING_FIELDS + STRING_LIST_FIELDS:
        for value in LONG_VALUES:
            sent = [value] if field in STRING_LIST_FIELDS else value
            r = post_run(api, problem_set, nested(field, sent))
            if r.status_code != 400 or not r.json().get("field", "").startswith(field.split(".")[0]):
                failures.append((field, value[:20], r.status_code))
    assert not failures, failures[:20]
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_a_huge_integer_in_a_float_field_is_a_400_naming_it(api, problem_set, field):
    r = post_run(api, problem_set, nested(field, 10**400))
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field


@pytest.mark.django_db
def test_a_lone_surrogate_in_every_string_field_is_a_400_naming_it(api, problem_set):
    failures = []
    for field in STRING_FIELDS + STRING_LIST_FIELDS:
        sent = [SURROGATE] if field in STRING_LIST_FIELDS else SURROGATE
        r = post_run(api, problem_set, nested(field, sent))
        if r.status_code != 400 or r.json().get("field") != field:
            failures.append((field, r.status_code, r.content[:200]))
    assert not failures, failures


@pytest.mark.django_db
def test_a_lone_surrogate_in_a_key_is_a_400(api, problem_set):
    r = post_run(api, problem_set, {"ppo": {SURROGATE: 1}})
    assert r.status_code == 400 and r.json()["field"].startswith("ppo.")


@pytest.mark.django_db
@pytest.mark.parametrize("name", [SURROGATE, "a\x00b", "red\x1b[31m", "two\nlines", "tab\there", "bell\x07",
                                  "next\u0085line", "rtl\u202eoverride"])
def test_a_run_name_with_a_lone_surrogate_or_control_character_is_refused(api, problem_set, name):
    r = post_run(api, problem_set, TINY_OVERRIDES, name=name)
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "name"
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_rename_form_refuses_control_characters_in_a_name(client_alice, run):
    r = client_alice.post(f"/runs/{run.pk}/edit", {"name": "bad\x1bname", "notes": "multi\nline notes are fine"})
    assert r.status_code in (200, 302)
    run.refresh_from_db()
    assert run.name == "first run"


@pytest.mark.django_db
def test_a_problem_set_name_with_control_characters_is_refused(api):
    f = __import__("io").BytesIO(problem_lines())
    f.name = "p.jsonl"
    r = api.post("/api/problem-sets", {"name": "bad\x1b[2Jname", "file": f})
    assert r.status_code == 400, r.content
    assert any(e["field"] == "name" for e in r.json()["errors"])


@pytest.mark.django_db
def test_an_uploaded_problem_whose_id_holds_a_lone_surrogate_is_reported_on_its_line(api):
    good = problem_lines(2, 1).decode().splitlines()
    bad = json.loads(good[0])
    bad["id"] = SURROGATE
    text = "\n".join([good[1], json.dumps(bad), good[2]]) + "\n"  # json.dumps escapes it as \ud800
    f = __import__("io").BytesIO(text.encode())
    f.name = "p.jsonl"
    r = api.post("/api/problem-sets", {"name": "surrogates", "file": f})
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["problems"] == 2
    assert [e["line"] for e in body["errors"]] == [2] and body["errors"][0]["field"] == "id"


@pytest.mark.django_db
def test_a_lone_surrogate_in_any_string_of_an_uploaded_problem_is_reported_on_its_line(api):
    good = problem_lines(2, 1).decode().splitlines()
    bad = json.loads(good[0])
    bad["prompt"] = SURROGATE
    bad["tests"] = ["assert add0(1, 2) == 3  # " + SURROGATE]
    text = "\n".join([json.dumps(bad), good[1], good[2]]) + "\n"
    f = __import__("io").BytesIO(text.encode())
    f.name = "p.jsonl"
    r = api.post("/api/problem-sets", {"name": "surrogates", "file": f})
    assert r.status_code == 201, r.content
    assert r.json()["problems"] == 2 and [e["line"] for e in r.json()["errors"]] == [1]


@pytest.mark.django_db
@pytest.mark.parametrize("model", LONG_VALUES + [SURROGATE, "models/" + SURROGATE, "models/a\x00b"])
def test_the_probe_endpoint_refuses_odd_model_names_naming_the_field(api, problem_set, model):
    r = api.post(f"/api/problem-sets/{problem_set.pk}/probe", {"model": model, "samples": 2},
                 content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "model"


@pytest.mark.django_db
@pytest.mark.parametrize("adapter", ["run:1/step-" + "9" * 5000, SURROGATE])
def test_the_probe_endpoint_refuses_odd_adapter_names_naming_the_field(api, problem_set, adapter):
    r = api.post(f"/api/problem-sets/{problem_set.pk}/probe", {"model": "models/tiny", "adapter": adapter,
                                                                "samples": 2}, content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["field"] == "adapter"


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["sampling.stop", "model.lora.target_modules", "reward.penalize_flags"])
def test_the_new_run_form_refuses_deep_nesting_in_a_list_field(client_alice, problem_set, field):
    client = Client(raise_request_exception=False)
    client.force_login(Run._meta.get_field("owner").related_model.objects.get(username="alice"))
    r = client.post("/runs/new", form_data(problem_set, **{field: "[" * 50_000 + "]" * 50_000}))
    assert r.status_code == 200, r.status_code
    assert not Run.objects.exists()
    assert "nested" in r.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["models/" + "a" * 5000, "models/" + "a" * 300, "models/a\x1bb"])
def test_the_new_run_form_refuses_odd_model_names_on_the_field(client_alice, problem_set, value):
    client = Client(raise_request_exception=False)
    client.force_login(Run._meta.get_field("owner").related_model.objects.get(username="alice"))
    r = client.post("/runs/new", form_data(problem_set, **{"model.name_or_path": value}))
    assert r.status_code == 200, r.status_code
    assert not Run.objects.exists()


def post_each_float_field(problem_set, value: str):
    """``(field, response)`` of the new-run form posted by the set's owner with ``value`` in each float field."""
    client = Client(raise_request_exception=False)
    client.force_login(problem_set.owner)
    for field in FLOAT_FIELDS:
        yield field, client.post("/runs/new", form_data(problem_set, **{field: value}))


@pytest.mark.django_db
def test_every_float_field_of_the_form_refuses_a_huge_integer(problem_set):
    failures = [(field, r.status_code) for field, r in post_each_float_field(problem_set, "9" * 401)
                if r.status_code != 200]
    assert not failures, failures
    assert not Run.objects.exists()


LOST_NUMBERS = ["1e-400", "0." + "0" * 400 + "1", "1.5e400"]  # read as 0, 0 and inf by a float


@pytest.mark.django_db
@pytest.mark.parametrize("literal", LOST_NUMBERS)
def test_a_number_no_float_holds_in_any_float_field_is_a_400_naming_it(api, problem_set, literal):
    failures = []
    for field in FLOAT_FIELDS:
        body = json.dumps({"name": "lost", "problem_set": problem_set.pk, "config": nested(field, "@@")})
        r = api.post("/api/runs", body.replace('"@@"', literal), content_type="application/json")
        if r.status_code != 400 or r.json().get("field") != field or "for a float" not in r.json()["detail"]:
            failures.append((field, r.status_code, r.content[:200]))
    assert not failures, failures
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_zero_written_as_zero_is_still_a_valid_kl_coef_and_temperature(api, problem_set):
    config = {**TINY_OVERRIDES, "ppo": {"kl_coef": "@k"}, "sampling": {**TINY_OVERRIDES["sampling"],
                                                                       "temperature": "@t"}}
    body = json.dumps({"name": "zeros", "problem_set": problem_set.pk, "config": config})
    r = api.post("/api/runs", body.replace('"@k"', "0.0").replace('"@t"', "0e5"), content_type="application/json")
    assert r.status_code == 201, r.content
    run = Run.objects.get()
    assert run.config["ppo"]["kl_coef"] == 0 and run.config["sampling"]["temperature"] == 0


@pytest.mark.django_db
def test_every_float_field_of_the_form_refuses_a_number_no_float_holds(problem_set):
    failures = [(field, r.status_code) for field, r in post_each_float_field(problem_set, "1e-400")
                if r.status_code != 200 or b"too small for a float" not in r.content]
    assert not failures, failures
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/nope/", "/ws/runs/abc/", "/ws/runs/1/extra/", "/ws/", "/nope"])
async def test_an_unrouted_websocket_path_is_refused_without_an_error(path, caplog):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import ApiToken
    from webapp.asgi import application

    user = await sync_to_async(get_user_model().objects.create_user)("wsodd", password="ws-password-1")
    token = (await sync_to_async(ApiToken.issue)(user, "t"))[1]
    communicator = WebsocketCommunicator(application, path, headers=[
        (b"origin", b"http://127.0.0.1"), (b"authorization", f"Bearer {token}".encode())])
    with caplog.at_level(logging.WARNING):
        connected, _ = await communicator.connect(timeout=10)  # default 1 s: too short on a loaded machine
    assert not connected
    await communicator.wait()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.django_db
def test_a_run_with_ordinary_odd_but_valid_values_still_launches(api, problem_set):
    config = {**TINY_OVERRIDES, "sampling": {**TINY_OVERRIDES["sampling"], "stop": ["\n\n", "\t#", "é"]}}
    r = post_run(api, problem_set, config, name="ünïcödé run — fine")
    assert r.status_code == 201, r.content


@pytest.mark.django_db
def test_a_trainer_event_holding_lone_surrogates_is_stored_with_replacement_characters(run):
    from webapp.runs.models import Candidate
    from webapp.runs.services import ingest_event

    from tests.factories import problem_event

    event = problem_event(1, problem_id="p\ud800")
    event["candidates"][0]["code"] = "print('\udcff')\n"  # as json.loads reads "\\udcff" from events.jsonl
    assert ingest_event(run, event, seq=0)
    candidate = Candidate.objects.get(run=run, index=0)
    assert candidate.code == "print('\ufffd')\n" and candidate.problem_id == "p\ufffd"
