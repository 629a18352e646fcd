"""/api/docs: Swagger UI from django-ninja's own static files (no CDN), inside the site's navigation."""


def test_the_api_page_serves_swagger_ui_from_this_server(client_alice):
    html = client_alice.get("/api/docs").content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in html and "/static/ninja/swagger-ui-init.js" in html
    assert "cdn" not in html.lower()
    assert '<script type="application/json" id="swagger-settings">' in html and "/api/openapi.json" in html


def test_the_api_page_keeps_the_sites_navigation(client_alice):
    html = client_alice.get("/api/docs").content.decode()
    assert 'class="topbar"' in html and '<a href="/runs/"' in html
    assert '<a href="/api/docs" class="active">API</a>' in html
