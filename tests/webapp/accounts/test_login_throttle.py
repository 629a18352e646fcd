"""Repeated wrong passwords are throttled per account and per address (issue 13, finding 7)."""
import pytest
from django.core.cache import cache

from webapp.accounts import throttle


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


def login(client, username, password, address="10.0.0.1"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_wrong_passwords_for_one_account_are_throttled_even_the_right_one(client, user):
    for _ in range(throttle.MAX_FAILURES_PER_ACCOUNT):
        assert login(client, "alice", "wrong").status_code == 200
    response = login(client, "alice", "alice-password-1", address="10.0.0.2")
    assert response.status_code == 200  # refused, even from another address
    assert b"Too many failed logins" in response.content
    assert not response.wsgi_request.user.is_authenticated


@pytest.mark.django_db
def test_one_address_trying_many_accounts_is_throttled(client, user):
    for i in range(throttle.MAX_FAILURES_PER_ADDRESS):
        login(client, f"nobody-{i}", "wrong")
    response = login(client, "alice", "alice-password-1")
    assert b"Too many failed logins" in response.content
    assert login(client, "alice", "alice-password-1", address="10.0.0.9").status_code == 302


@pytest.mark.django_db
def test_a_success_before_the_limit_forgets_the_accounts_failures(client, user):
    for _ in range(throttle.MAX_FAILURES_PER_ACCOUNT - 1):
        login(client, "alice", "wrong")
    assert login(client, "alice", "alice-password-1").status_code == 302
    client.logout()
    for _ in range(throttle.MAX_FAILURES_PER_ACCOUNT - 1):
        login(client, "alice", "wrong", address="10.0.0.3")
    assert login(client, "alice", "alice-password-1", address="10.0.0.3").status_code == 302


@pytest.mark.django_db
def test_the_admin_login_is_throttled_too(client, admin_user):
    for _ in range(throttle.MAX_FAILURES_PER_ACCOUNT):
        client.post("/admin/login/", {"username": "admin", "password": "wrong"}, REMOTE_ADDR="10.0.0.4")
    response = client.post("/admin/login/", {"username": "admin", "password": "password"}, REMOTE_ADDR="10.0.0.4")
    assert b"Too many failed logins" in response.content
