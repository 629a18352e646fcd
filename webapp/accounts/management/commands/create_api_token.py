from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.accounts.models import ApiToken


class Command(BaseCommand):
    help = "Create a personal API token for USERNAME and print only the token."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="a label shown in the token list")

    def handle(self, username, name, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user named {username!r}; create one with: manage.py create_user {username}") from None
        _, raw = ApiToken.issue(user, name)
        self.stdout.write(raw)
