from .conftest import login


def test_a_user_logs_in_and_sees_the_dashboard_shell(page, live_server_url, user, output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    assert page.locator("h1").inner_text() == "Dashboard"
    nav = page.locator("nav.nav")
    assert nav.get_by_text("Problem sets").is_visible() and nav.get_by_text("Runs").is_visible()
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).display") == "flex"  # CSS served
    page.screenshot(path=str(output_dir / "dashboard-shell.png"), full_page=True)
    page.click("text=Log out")
    page.wait_for_url("**/login/")


def test_a_missing_run_shows_the_apps_own_404_with_a_way_back(page, live_server_url, user):
    login(page, live_server_url, "alice", "alice-password-1")
    response = page.goto(f"{live_server_url}/runs/999999/")
    assert response.status == 404
    assert page.locator("#error-page h1").inner_text() == "Nothing here"
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).display") == "flex"  # the app's frame
    page.click("#error-ways-back >> text=Back to the dashboard")
    page.wait_for_url(f"{live_server_url}/")
    assert page.locator("h1").inner_text() == "Dashboard"
