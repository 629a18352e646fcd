"""The API page renders Swagger UI (offline: its files come from this server) under the site's navigation."""
from .conftest import login


def test_the_api_page_renders_its_operations_under_the_navigation(page, live_server_url, user, output_dir):
    failed = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    login(page, live_server_url, "alice", "alice-password-1")
    page.click("nav.nav >> text=API")
    page.wait_for_selector("#swagger-ui .opblock", timeout=30_000)
    assert "Crucible API" in page.locator("#swagger-ui .info .title").inner_text()
    assert page.locator("nav.nav a.active").inner_text() == "API"
    assert not failed, failed
    page.screenshot(path=str(output_dir / "api-docs.png"))
