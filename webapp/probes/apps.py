from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "webapp.probes"
    label = "probes"
