"""Every field a page script reads off an API response is declared by that endpoint's schema in
/api/openapi.json (django-ninja drops undeclared fields from a response: a field the script reads but the
schema lacks arrives as ``undefined``, as the what-if table's ranks once did).

Each script under static/js that fetches /api/… declares what it reads in ``// @api METHOD PATH field …``
lines (a field is a dotted path; ``[]`` steps into a list's items). The test holds the declarations to
the code on three sides: each /api fetch in the script has a declaration, each declared field is read in
the script, and each snake_case property the script reads is either a declared API field or listed on a
``// @reads-elsewhere …`` line (event fields, embedded state) — so a new read cannot go undeclared.
"""
import re
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parents[3] / "static" / "js"
DECLARATION = re.compile(r"^\s*//\s*@api\s+(GET|POST)\s+(\S+)\s+(.*)$", re.MULTILINE)
ELSEWHERE = re.compile(r"^\s*//\s*@reads-elsewhere\s+(.*)$", re.MULTILINE)
FETCH = re.compile(r"fetch\(\s*([^,)]*)")
# a property read: `.name` or `["name"]` with an underscore, `@` or `/` in it (API and metric keys are
# snake_case; DOM and JS built-ins are camelCase, so this catches the reads that can come off an answer)
SNAKE_READ = re.compile(r"\.([a-z][a-z0-9]*_[a-z0-9_]+)\b|\[\"([^\"]*[_@/][^\"]*)\"\]")


def scripts_that_fetch_the_api() -> list[Path]:
    return sorted(p for p in JS_DIR.glob("*.js") if re.search(r"fetch\(\s*\"/api/", p.read_text()))


def fetched_paths(source: str) -> set[str]:
    """``/api/runs/{}/rescore`` for ``fetch("/api/runs/" + runId + "/rescore", …)``: the literal pieces
    kept, each expression between them a ``{}``, the query string dropped."""
    out = set()
    for arg in FETCH.findall(source):
        pieces = [p.strip() for p in arg.split("+")]
        if not pieces[0].startswith('"/api/'):
            continue
        path = "".join(p.strip('"') if p.startswith('"') else "{}" for p in pieces)
        out.add(path.split("?")[0].rstrip("/") if "?" in path else path)
    return out


def template(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def resolve(schema: dict, components: dict) -> dict:
    while True:
        if "$ref" in schema:
            schema = components[schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema or "allOf" in schema:  # `X | None`: the one that is not null
            options = [s for s in schema.get("anyOf", schema.get("allOf", [])) if s.get("type") != "null"]
            schema = options[0]
        else:
            return schema


def declared(schema: dict, field: str, components: dict) -> bool:
    for part in field.split("."):
        schema = resolve(schema, components)
        name, into_items = (part[:-2], True) if part.endswith("[]") else (part, False)
        if not name:  # `[].id`: the answer itself is the list
            pass
        elif schema.get("type") == "object" and "properties" not in schema and schema.get("additionalProperties"):
            schema = schema["additionalProperties"] if schema["additionalProperties"] is not True else {}
        elif name not in schema.get("properties", {}):
            return False
        else:
            schema = schema["properties"][name]
        if into_items:
            schema = resolve(schema, components)
            if schema.get("type") != "array":
                return False
            schema = schema["items"]
    return True


def response_schema(openapi: dict, method: str, path: str) -> dict:
    matches = [p for p in openapi["paths"] if template(p) == template(path)]
    assert matches, f"{method} {path}: no such path in /api/openapi.json"
    operation = openapi["paths"][matches[0]].get(method.lower())
    assert operation, f"{method} {path}: /api/openapi.json has no {method} there"
    ok = next(code for code in ("200", "201") if code in operation["responses"])
    return operation["responses"][ok]["content"]["application/json"]["schema"]


@pytest.fixture(scope="module")
def openapi(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        return Client().get("/api/openapi.json").json()


def test_some_page_scripts_read_the_api():
    assert {p.name for p in scripts_that_fetch_the_api()} >= {"whatif.js", "run_detail.js", "run_difficulty.js"}


@pytest.mark.parametrize("script", scripts_that_fetch_the_api(), ids=lambda p: p.name)
def test_each_field_a_page_script_reads_off_the_api_is_declared_by_its_schema(script, openapi):
    source = script.read_text()
    declarations = [(m, path, fields.split()) for m, path, fields in DECLARATION.findall(source)]
    assert declarations, f"static/js/{script.name} fetches /api but has no `// @api METHOD PATH fields` line"
    undeclared_fetches = {template(p) for p in fetched_paths(source)} - {template(p) for _, p, _ in declarations}
    assert not undeclared_fetches, f"static/js/{script.name} fetches {sorted(undeclared_fetches)} without an @api line"

    components = openapi["components"]["schemas"]
    missing = [f"{method} {path}: {field}" for method, path, fields in declarations for field in fields
               if not declared(response_schema(openapi, method, path), field, components)]
    assert not missing, f"static/js/{script.name} reads fields its endpoint's schema does not declare " \
                        f"(the API strips them): {missing}"

    code = "\n".join(re.sub(r"(?<![:\"'\\])//.*$", "", line) for line in source.splitlines())  # comments out
    leaves = {f.split(".")[-1].removesuffix("[]") for _, _, fields in declarations for f in fields}
    on_the_way = {part.removesuffix("[]") for _, _, fields in declarations for f in fields for part in f.split(".")}
    unread = sorted(leaf for leaf in leaves if f".{leaf}" not in code and f'"{leaf}"' not in code)
    assert not unread, f"static/js/{script.name} declares fields it never reads: {unread}"

    elsewhere = {name for line in ELSEWHERE.findall(source) for name in line.split()}
    reads = {a or b for a, b in SNAKE_READ.findall(code)}
    unaccounted = sorted(reads - on_the_way - elsewhere)
    assert not unaccounted, f"static/js/{script.name} reads {unaccounted}: declare each on its @api line or " \
                            f"on a `// @reads-elsewhere` line"


def test_an_undeclared_field_is_caught():
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/C"}}}}
    components = {"C": {"type": "object", "properties": {"rank": {"type": "number"}}}}
    assert declared(schema, "items[].rank", components)
    assert not declared(schema, "items[].rank_before", components)
    assert not declared(schema, "rank", components)
