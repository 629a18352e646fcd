"""`manage.py load_demo`: create or refresh the "Demo problems" set from data/demo/problems.jsonl."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

DEMO_NAME = "Demo problems"


class Command(BaseCommand):
    help = ("Create (or refresh, when the file changed) the problem set 'Demo problems' from "
            "data/demo/problems.jsonl for the first superuser, and queue its validation. Idempotent.")

    def add_arguments(self, parser):
        parser.add_argument("--file", default=str(Path(settings.BASE_DIR) / "data" / "demo" / "problems.jsonl"),
                            help="problem file to load (default: %(default)s)")
        parser.add_argument("--user", help="owner's username (default: the first superuser)")
        parser.add_argument("--sync", action="store_true",
                            help="validate here and now instead of queueing the job for a sandbox worker")

    def handle(self, *args, file: str, user: str | None, sync: bool, **options):
        from sandbox.formats import load_problems

        from webapp.problems import services
        from webapp.problems.models import ProblemSet

        path = Path(file)
        if not path.exists():
            self.stdout.write(f"load_demo: {path} does not exist; no demo problem set loaded.")
            return
        owner = self._owner(user)
        if owner is None:
            self.stdout.write("load_demo: there is no superuser yet (run `manage.py ensure_admin` or "
                              "`createsuperuser`); no demo problem set loaded.")
            return
        result = load_problems(path)
        if not result.problems:
            raise CommandError(f"{path}: no problem could be read: "
                               + "; ".join(str(e) for e in result.errors[:5]))
        for error in result.errors:
            self.stderr.write(f"{path}: {error}")
        errors = [e.to_dict() for e in result.errors]
        # Compared without ``excluded``: the row's column, which the user's own curation of the demo set changes.
        wanted = [services.row_data(p) for p in result.problems]

        existing = ProblemSet.objects.filter(owner=owner, name=DEMO_NAME).order_by("pk").first()
        if existing is None:
            with path.open("rb") as f:
                ps, _ = services.create_problem_set(owner, DEMO_NAME, f, "auto", validate=False)
            action = "created"
        elif [row.data for row in existing.problems.order_by("position")] != wanted:
            ps = services.replace_problems(existing, result.problems, format=result.format, errors=errors,
                                           validate=False)
            action = "refreshed"
        else:
            ps = existing
            action = "unchanged"

        # A stale pending/running state (a worker stopped mid-job, a purged queue) is queued again.
        if action != "unchanged" or ps.validation_status != ProblemSet.Validation.DONE:
            if sync:
                ps = services.validate_problem_set(ps.pk, force=True)
            else:
                ps = services.enqueue_validation(ps)
        self.stdout.write(f"load_demo: {DEMO_NAME!r} (id {ps.pk}) {action}: {ps.problem_count} problems "
                          f"({ps.train_count} train, {ps.heldout_count} held-out), validation {ps.validation_status}")

    def _owner(self, username: str | None):
        User = get_user_model()
        if username:
            try:
                return User.objects.get(username=username)
            except User.DoesNotExist:
                raise CommandError(f"--user {username!r}: no such user") from None
        return User.objects.filter(is_superuser=True).order_by("pk").first()
