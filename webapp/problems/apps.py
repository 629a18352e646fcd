from django.apps import AppConfig


class ProblemsConfig(AppConfig):
    name = "webapp.problems"
    label = "problems"
