"""The JSON API (`/api/`, OpenAPI schema at `/api/openapi.json`). Apps contribute routers."""
from django.http import HttpRequest
from ninja import NinjaAPI

from webapp.accounts.auth import API_AUTH

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
)


@api.get("/me", summary="The authenticated user")
def me(request: HttpRequest) -> dict:
    user = request.auth if hasattr(request.auth, "username") else request.user
    return {"id": user.pk, "username": user.username, "is_staff": user.is_staff}


def _mount_routers() -> None:
    import importlib

    for module_name, prefix in (("webapp.problems.api", "/problem-sets"), ("webapp.runs.api", "/runs")):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        api.add_router(prefix, module.router)
    try:
        from webapp.runs.api import presets_router
    except ImportError:
        return
    api.add_router("/presets", presets_router)


_mount_routers()
