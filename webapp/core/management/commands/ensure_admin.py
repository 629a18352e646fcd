import secrets
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "On first start, create the local admin with a generated password (printed once, kept under the data dir)."

    def handle(self, **options):
        User = get_user_model()
        path = settings.DATA_DIR / "admin-password.txt"
        if User.objects.filter(is_superuser=True).exists():
            if path.exists():
                self.stdout.write(f"Admin login: admin (password in {path})")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        path.write_text(f"username: admin\npassword: {password}\n")
        path.chmod(0o600)
        self.stdout.write(self.style.SUCCESS(
            f"Created the local admin account.\n  username: admin\n  password: {password}\n"
            f"  (shown once; also saved in {path})"))
        sys.stdout.flush()
