"""Personal API tokens: Bearer auth, revocation, management commands."""
import io

import pytest
from django.core.management import CommandError, call_command

from webapp.accounts.models import ApiToken


@pytest.mark.django_db
def test_a_bearer_token_authenticates_api_calls(client, user):
    _, raw = ApiToken.issue(user, "script")
    response = client.get("/api/me", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert response.json()["username"] == "alice"


@pytest.mark.django_db
def test_a_revoked_or_wrong_token_gets_401(client, user):
    token, raw = ApiToken.issue(user)
    token.revoke()
    assert client.get("/api/me", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert client.get("/api/me", HTTP_AUTHORIZATION="Bearer cru_nonsense").status_code == 401


@pytest.mark.django_db
def test_tokens_are_stored_only_as_digests(user):
    token, raw = ApiToken.issue(user)
    assert raw not in token.key_digest and len(token.key_digest) == 64


@pytest.mark.django_db
def test_create_api_token_prints_only_the_token(user, client):
    out = io.StringIO()
    call_command("create_api_token", "alice", stdout=out)
    raw = out.getvalue().strip()
    assert raw.startswith("cru_") and "\n" not in raw
    assert client.get("/api/me", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


@pytest.mark.django_db
def test_create_api_token_names_a_missing_user():
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        call_command("create_api_token", "ghost")


@pytest.mark.django_db
def test_create_user_makes_a_plain_user(monkeypatch):
    from django.contrib.auth import get_user_model

    monkeypatch.setenv("CRUCIBLE_PASSWORD", "a-long-password")
    call_command("create_user", "dave", stdout=io.StringIO())
    dave = get_user_model().objects.get(username="dave")
    assert dave.check_password("a-long-password") and not dave.is_staff and not dave.is_superuser


@pytest.mark.django_db
def test_users_create_and_revoke_tokens_in_the_ui(client_alice):
    page = client_alice.post("/tokens/", {"name": "laptop"})
    assert page.status_code == 200
    token = ApiToken.objects.get(name="laptop")
    assert token.hint.encode() in page.content
    client_alice.post(f"/tokens/{token.pk}/revoke")
    token.refresh_from_db()
    assert token.revoked is not None


@pytest.mark.django_db
def test_another_users_token_cannot_be_revoked(client_alice, other_user):
    token, _ = ApiToken.issue(other_user)
    assert client_alice.post(f"/tokens/{token.pk}/revoke").status_code == 404
