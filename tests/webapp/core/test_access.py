"""Every URL in the URL conf refuses anonymous users: pages redirect to login, the API answers 401."""
import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

PUBLIC = {"/login/", "/healthz", "/api/openapi.json", "/api/docs"}
NOT_ENDPOINTS = {"/api/", "/api/x"}  # ninja's root pattern and the JSON 404 for unknown API paths


def walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def concrete(route: str) -> str:
    route = route.lstrip("^").rstrip("$").replace("\\Z", "").replace("\\", "")
    route = re.sub(r"<int:[^>]+>", "1", route)
    route = re.sub(r"<(?:str|slug|path):?[^>]*>", "x", route)
    route = re.sub(r"\{[^}]+\}", "1", route)
    route = re.sub(r"\(\?P<[^>]+>[^)]*\)", "x", route)
    return "/" + route


def all_paths():
    paths = sorted({concrete(r) for r in walk(get_resolver().url_patterns)})
    return [p for p in paths if not p.startswith("/admin/") and p not in PUBLIC | NOT_ENDPOINTS and "(" not in p]


@pytest.mark.django_db
def test_the_url_conf_has_pages_and_api_endpoints():
    paths = all_paths()
    assert any(p.startswith("/api/") for p in paths)
    assert "/" in paths


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_every_url_refuses_anonymous_users(client, method):
    for path in all_paths():
        response = getattr(client, method)(path)
        if path.startswith("/api/"):
            assert response.status_code in (401, 405), (path, response.status_code)
            if response.status_code == 401:
                assert response.json() == {"detail": "Unauthorized"}, path
        else:
            assert response.status_code in (302, 405), (path, response.status_code)
            if response.status_code == 302:
                assert response["Location"].startswith("/login/"), path


@pytest.mark.django_db
def test_admin_requires_staff_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.django_db
def test_login_page_is_public_and_logged_in_user_sees_dashboard(client, user):
    assert client.get("/login/").status_code == 200
    assert client.post("/login/", {"username": "alice", "password": "alice-password-1"}).status_code == 302
    page = client.get("/")
    assert page.status_code == 200
    assert b"Problem sets" in page.content and b"Runs" in page.content


@pytest.mark.django_db
def test_plotly_is_served_locally_with_whitenoise(client, user):
    client.force_login(user)
    response = client.get("/static/vendor/plotly/plotly.min.js")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"plotly" in body[:2000].lower()


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post", "delete"])
@pytest.mark.parametrize("logged_in", [False, True])
def test_unknown_api_paths_answer_json_404(client, django_user_model, method, logged_in):
    if logged_in:
        client.force_login(django_user_model.objects.create_user("walker", password="pw"))
    response = getattr(client, method)("/api/runz/1/metrics")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert "/api/runz/1/metrics" in response.json()["detail"]
    # Known endpoints still win over the catch-all.
    assert client.get("/api/me").status_code == (200 if logged_in else 401)


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["post", "delete"])
def test_anonymous_unsafe_api_calls_answer_401_json_not_a_csrf_403(method):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    for path in ("/api/runs", "/api/problem-sets", "/api/runs/1/cancel", "/api/problem-sets/1"):
        response = getattr(client, method)(path, content_type="application/json", data="{}")
        assert response.status_code in (401, 405), (path, response.status_code, response.content[:200])
        if response.status_code == 401:
            assert response.json() == {"detail": "Unauthorized"}, path


@pytest.mark.django_db
def test_a_logged_in_session_still_needs_the_csrf_token_for_unsafe_api_calls(user):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post("/api/runs", content_type="application/json", data="{}")
    assert response.status_code == 403


@pytest.mark.django_db
def test_every_response_carries_a_content_security_policy_without_inline_scripts(client, user):
    client.force_login(user)
    for path in ("/", "/runs/", "/problem-sets/", "/api/docs", "/login/"):
        policy = client.get(path)["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
        assert "frame-ancestors 'none'" in policy
