from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "webapp.probes"
    label = "probes"

    def ready(self) -> None:
        from webapp.core.queueing import register

        from .lane import PROBE_LANE

        register(PROBE_LANE)  # a pending probe says where it stands on the gpu_short queue
