"""404, 403 and 500 are the app's own pages: its top bar, what happened, and links back (Django's
unstyled defaults had no way back)."""
import pytest
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from tests.factories import install_model_stub, make_run


def ways_back(html: str) -> bool:
    return 'class="topbar"' in html and 'id="error-ways-back"' in html and 'href="/runs/"' in html \
        and "Back to the dashboard" in html


def test_a_missing_page_is_a_404_inside_the_app_with_ways_back(client_alice):
    r = client_alice.get("/runs/no-such-page/")
    assert r.status_code == 404
    html = r.content.decode()
    assert ways_back(html) and 'data-status="404"' in html
    assert "/runs/no-such-page/" in html  # says what was asked for
    assert '<nav class="nav">' in html  # the signed-in frame, not a bare page


def test_another_tenants_run_is_the_same_404_as_a_missing_one(client, user, other_user, settings, tmp_path):
    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")
    run = make_run(other_user, "bob's run")
    client.force_login(user)
    r = client.get(f"/runs/{run.pk}/")
    assert r.status_code == 404
    assert ways_back(r.content.decode()) and "bob's run" not in r.content.decode()


def test_forbidden_is_a_403_inside_the_app(user):
    from django.views.defaults import permission_denied

    request = RequestFactory().get("/admin-only/")
    request.user = user
    r = permission_denied(request, PermissionDenied("staff only"))
    assert r.status_code == 403
    html = r.content.decode()
    assert ways_back(html) and 'data-status="403"' in html and "staff only" in html


@pytest.mark.django_db
def test_a_server_error_is_a_500_inside_the_app_that_renders_without_a_request_context():
    from django.views.defaults import server_error

    r = server_error(RequestFactory().get("/runs/1/"))  # Django renders 500.html with no context at all
    assert r.status_code == 500
    html = r.content.decode()
    assert ways_back(html) and 'data-status="500"' in html and "is kept" in html
