"""Content-Security-Policy on every response.

Scripts only from this origin (every page's JS is a file under static/, plotly and the API docs are
served locally), nothing framed, forms posted only here. Styles allow inline: templates carry small
`style` attributes and plotly writes its own `<style>` elements and inline styles as it draws.
"""
from __future__ import annotations

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse


def content_security_policy(request: HttpRequest) -> str:
    try:
        host = request.get_host()
    except DisallowedHost:  # the response is already the 400 for it; allow no websocket at all
        host = None
    return "; ".join([
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        # 'self' covers same-host websockets only in CSP level 3 browsers: name them for the others.
        f"connect-src 'self' ws://{host} wss://{host}" if host else "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ])


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", content_security_policy(request))
        return response
