import pytest


@pytest.fixture(autouse=True)
def fresh_health_report():
    """Each test sees a health report of its own services, not one cached by an earlier test."""
    from webapp.core import health

    health.forget()
    yield
    health.forget()
