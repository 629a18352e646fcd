from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "webapp.core"
    label = "core"

    def ready(self) -> None:
        from django.core.checks import Tags, register

        from .checks import check_squashed_migrations

        register(check_squashed_migrations, Tags.database)  # run by `migrate` before it touches the database
