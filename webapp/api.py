"""The JSON API (`/api/`, OpenAPI schema at `/api/openapi.json`). Apps contribute routers."""
import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import ValidationError
from ninja.parser import Parser

from training.config import ConfigError, json_number

from webapp.accounts.auth import API_AUTH
from webapp.core.refusals import Conflict
from webapp.probes.api import router as probes_router
from webapp.problems.api import router as problem_sets_router
from webapp.runs.api import engines_router, presets_router, router as runs_router

class BodyParser(Parser):
    """JSON bodies with ``training.config.json_number``: a number literal no float holds as written
    (``1e-400`` read as 0) stays a string that a run config refuses naming its field, not a 0 nobody wrote."""

    def parse_body(self, request: HttpRequest):
        return json.loads(request.body, parse_float=json_number)


api = NinjaAPI(
    title="Crucible API",
    version="1",
    description="Problem sets, training runs, metrics, candidates and checkpoints. "
                "Session cookie or `Authorization: Bearer TOKEN` (create tokens on the Tokens page "
                "or with `manage.py create_api_token USERNAME`).",
    auth=API_AUTH,
    openapi_url="/openapi.json",
    docs_url="/docs",
    urls_namespace="api",
    parser=BodyParser(),
)


# Where ninja says a bad value came from; the rest of `loc` is the field (docs/design.md "Web (webapp/)":
# a 400 naming it).
_SOURCES = ("body", "query", "path", "form", "file", "header", "cookie")


@api.exception_handler(ValidationError)
def bad_input(request: HttpRequest, exc: ValidationError):
    """Malformed input answers 400 `{detail, field, errors}`, like a bad config value does."""
    first = exc.errors[0] if exc.errors else {}
    loc = [str(part) for part in first.get("loc", ())]
    if loc and loc[0] in _SOURCES:
        loc = loc[1:]
        if loc and loc[0] == "payload":  # the view's parameter name, not part of the document
            loc = loc[1:]
    field = ".".join(loc) or None
    message = first.get("msg", "invalid input")
    return api.create_response(request, {"detail": f"{field}: {message}" if field else message,
                                         "field": field, "errors": exc.errors}, status=400)


@api.exception_handler(RequestDataTooBig)
def body_too_large(request: HttpRequest, exc: RequestDataTooBig):
    """A body past DATA_UPLOAD_MAX_MEMORY_SIZE: a JSON 400 like any bad input, not Django's HTML page."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api.create_response(request, {"detail": f"request body too large: the limit is {limit >> 20} MiB "
                                                   f"({limit} bytes)", "field": None}, status=400)


@api.exception_handler(ConfigError)
def bad_value(request: HttpRequest, exc: ConfigError):
    """A service's refusal of a value (a run config, a model name, a problem set): 400 naming the field."""
    return api.create_response(request, {"detail": str(exc), "field": exc.field}, status=400)


@api.exception_handler(Conflict)
def conflict(request: HttpRequest, exc: Conflict):
    """A sound request that the state of what it names forbids now (webapp.core.refusals): 409."""
    return api.create_response(request, {"detail": str(exc)}, status=409)


@api.get("/me", summary="The authenticated user")
def me(request: HttpRequest) -> dict:
    user = request.auth if hasattr(request.auth, "username") else request.user
    return {"id": user.pk, "username": user.username, "is_staff": user.is_staff}


api.add_router("/problem-sets", problem_sets_router)
api.add_router("/problem-sets", probes_router)
api.add_router("/runs", runs_router)
api.add_router("/presets", presets_router)
api.add_router("/engines", engines_router)
api.add_router("/evals", "webapp.evals.api.router")
