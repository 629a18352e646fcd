from django.urls import path

from . import views

urlpatterns = [
    path("runs/", views.run_list, name="run-list"),
    path("runs/new", views.run_new, name="run-new"),
    path("runs/new/set-issues", views.run_new_set_issues, name="run-new-set-issues"),
    path("runs/compare", views.run_compare, name="run-compare"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<int:run_id>/edit", views.run_edit, name="run-edit"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="run-cancel"),
    path("runs/<int:run_id>/resume", views.run_resume, name="run-resume"),
    path("runs/<int:run_id>/config.yaml", views.run_config_yaml, name="run-config-yaml"),
    path("runs/<int:run_id>/runtime", views.run_runtime, name="run-runtime"),
    path("runs/<int:run_id>/engine-log", views.run_engine_log, name="run-engine-log"),
    path("runs/<int:run_id>/integrity", views.run_integrity, name="run-integrity"),
    path("runs/<int:run_id>/problems/<path:problem_id>/candidates", views.run_candidates, name="run-candidates"),
]
