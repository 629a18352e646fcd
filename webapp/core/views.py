from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .health import health, public_view


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Public status (a report at most a few seconds old); worker host names only for logged-in users."""
    report, ok = health()
    if not request.user.is_authenticated:
        report = public_view(report)
    return JsonResponse(report, status=200 if ok else 503)


@login_not_required
@never_cache
def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any /api/ path no endpoint serves: a JSON 404 (API clients should never parse an HTML page)."""
    return JsonResponse({"detail": f"no API endpoint {request.method} {request.path}; "
                                   "the endpoints are listed at /api/docs"}, status=404)

