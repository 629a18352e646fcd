from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "webapp.runs"
    label = "runs"

    def ready(self) -> None:
        from webapp.core.queueing import register

        from .lane import RUN_LANE

        register(RUN_LANE)  # a queued job's line names the runs it waits for
