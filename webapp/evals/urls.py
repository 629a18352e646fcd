from django.urls import path

from . import views

app_name = "evals"

urlpatterns = [
    path("evals/", views.evaluations, name="list"),
    path("evals/new", views.create, name="create"),
    path("evals/<int:pk>", views.detail, name="detail"),
    path("evals/<int:pk>/cancel", views.cancel, name="cancel"),
    path("evals/<int:pk>/problems/<path:problem_id>", views.problem, name="problem"),
    path("runs/<int:run_id>/evaluate", views.before_after, name="before-after"),
]
