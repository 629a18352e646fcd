from django.urls import path

from . import views

app_name = "problems"

urlpatterns = [
    path("problem-sets/", views.problem_set_list, name="list"),
    path("problem-sets/<int:pk>/", views.problem_set_detail, name="detail"),
    path("problem-sets/<int:pk>/problems/<int:problem_pk>/", views.problem_detail, name="problem"),
    path("problem-sets/<int:pk>/export.jsonl", views.problem_set_export, name="export"),
    path("problem-sets/<int:pk>/delete", views.problem_set_delete, name="delete"),
    path("problem-sets/<int:pk>/validate", views.problem_set_validate, name="validate"),
    path("problem-sets/<int:pk>/heldout", views.problem_set_heldout, name="heldout"),
    path("problem-sets/<int:pk>/problems/<int:problem_pk>/exclude", views.problem_exclude, name="exclude"),
]
