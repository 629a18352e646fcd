import getpass
import os
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

PASSWORD_VARIABLE = "CRUCIBLE_PASSWORD"


class Command(BaseCommand):
    help = (f"Create a plain (non-staff) user. The password comes from ${PASSWORD_VARIABLE} (the safe way: "
            "a command-line argument is visible to every user of the machine in the process list), "
            "else from a prompt when standard input is a terminal, else from --password.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", default=None,
                            help=f"visible in the process list; prefer ${PASSWORD_VARIABLE} or the prompt")
        parser.add_argument("--email", default="")
        parser.add_argument("--staff", action="store_true", help="let the user see every user's runs")

    def handle(self, username, password, email, staff, **options):
        password = password or os.environ.get(PASSWORD_VARIABLE) or self.prompt()
        if not password:
            raise CommandError(f"No password: set {PASSWORD_VARIABLE}, run it in a terminal to be asked, "
                               "or pass --password")
        if len(password) < 8:
            raise CommandError("Password too short: at least 8 characters")
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            raise CommandError(f"User {username!r} already exists")
        User.objects.create_user(username=username, password=password, email=email, is_staff=staff)
        self.stdout.write(f"Created user {username}")

    def prompt(self) -> str | None:
        if not sys.stdin.isatty():
            return None
        first = getpass.getpass("Password: ")
        if first != getpass.getpass("Password (again): "):
            raise CommandError("The two passwords differ")
        return first
