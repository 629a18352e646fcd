from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from webapp.accounts import views as account_views
from webapp.accounts.throttle import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm
from webapp.api import api
from webapp.core import views as core_views
from webapp.dashboard import dashboard
from webapp.probes import urls as probe_urls
from webapp.problems import urls as problem_urls
from webapp.runs import urls as run_urls

admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("", dashboard, name="dashboard"),
    path("healthz", core_views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tokens/", account_views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", account_views.revoke_token, name="revoke-token"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include(problem_urls)),
    path("", include(probe_urls)),
    path("", include(run_urls)),
    path("", include("webapp.evals.urls")),
    # Last, so that every page and API route above wins: unknown /api/ paths answer JSON, not the HTML 404 page.
    re_path(r"^api/(?P<rest>.*)$", core_views.api_not_found, name="api-not-found"),
]
