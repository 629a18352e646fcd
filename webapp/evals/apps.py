from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "webapp.evals"
    label = "evals"

    def ready(self) -> None:
        # The checkpoint's model card (webapp.runs.archive) carries the benchmark numbers through the hook
        # it offers: the runs app never imports this one.
        from webapp.runs import archive

        from .card import card_section

        archive.register_card_section(card_section)
