import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Create a plain (non-staff) user. Password from --password or $CRUCIBLE_PASSWORD."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", default=None)
        parser.add_argument("--email", default="")
        parser.add_argument("--staff", action="store_true", help="let the user see every user's runs")

    def handle(self, username, password, email, staff, **options):
        password = password or os.environ.get("CRUCIBLE_PASSWORD")
        if not password:
            raise CommandError("No password: pass --password or set CRUCIBLE_PASSWORD")
        if len(password) < 8:
            raise CommandError("Password too short: at least 8 characters")
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            raise CommandError(f"User {username!r} already exists")
        User.objects.create_user(username=username, password=password, email=email, is_staff=staff)
        self.stdout.write(f"Created user {username}")
