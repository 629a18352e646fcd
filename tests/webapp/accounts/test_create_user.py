"""create_user takes the password from the environment or a prompt, so it stays out of the process list."""
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command


@pytest.mark.django_db
def test_the_password_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("CRUCIBLE_PASSWORD", "from-the-env-1")
    call_command("create_user", "erin", stdout=io.StringIO())
    assert get_user_model().objects.get(username="erin").check_password("from-the-env-1")


@pytest.fixture
def typed(monkeypatch):
    """No CRUCIBLE_PASSWORD and stdin a terminal; ``typed(*answers)``: what the password prompts read, in order."""
    monkeypatch.delenv("CRUCIBLE_PASSWORD", raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)

    def type_answers(*answers):
        answer = iter(answers)
        monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answer))
    return type_answers


@pytest.mark.django_db
def test_without_flag_or_environment_it_prompts_twice_on_a_terminal(typed):
    typed("typed-password-1", "typed-password-1")
    call_command("create_user", "frank", stdout=io.StringIO())
    assert get_user_model().objects.get(username="frank").check_password("typed-password-1")


@pytest.mark.django_db
def test_a_mistyped_second_prompt_creates_nobody(typed):
    typed("typed-password-1", "typed-password-2")
    with pytest.raises(CommandError, match="differ"):
        call_command("create_user", "gina", stdout=io.StringIO())
    assert not get_user_model().objects.filter(username="gina").exists()
