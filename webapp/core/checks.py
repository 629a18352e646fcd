"""A check ``manage.py migrate`` (and so ``make run``) runs before it touches a database: no squashed migration
may stand half applied.

problems 0001-0008 and runs 0001-0012 were squashed into one initial migration each (docs/design.md,
"Migrations") and the old files deleted. A database that applied all of them, or none, migrates as before;
one that applied only some cannot be finished by this code, and Django alone fails on it with
``ValueError: Related model 'problems.problemset' cannot be resolved``. This check refuses it first and says
how to bring it up to date: with the code from before the squash.
"""
from __future__ import annotations

import shlex
import sys
import tempfile

from django.conf import settings
from django.core.checks import Error
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

# The last commit whose migrations are the separate files the squashes replace.
BEFORE_SQUASH = "4ae9394"


def check_squashed_migrations(databases=None, **kwargs) -> list[Error]:
    """Run by ``migrate`` (and ``check --database``) for the database it migrates."""
    errors = []
    for alias in databases or []:
        connection = connections[alias]
        if squashes := half_applied_squashes(connection):
            errors.append(Error(
                f"The database {connection.settings_dict['NAME']!r} applied only some of the migrations that a "
                "squashed migration replaces, and this code no longer has the others:\n  " + "\n  ".join(squashes),
                hint=upgrade_hint(), id="crucible.E001"))
    return errors


def half_applied_squashes(connection) -> list[str]:
    """A line per squashed migration of which ``connection``'s database applied some of the replaced
    migrations, not all, while this code no longer has the ones it lacks."""
    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return []
    applied = set(recorder.applied_migrations())
    loader = MigrationLoader(None, load=False)
    loader.load_disk()
    lines = []
    for (app, name), migration in sorted(loader.disk_migrations.items()):
        replaces = [tuple(key) for key in migration.replaces or ()]
        done = [key for key in replaces if key in applied]
        missing = [key for key in replaces if key not in applied]
        if not done or not missing or all(key in loader.disk_migrations for key in missing):
            continue
        lines.append(f"{app} {name}: applied {', '.join(n for _, n in done)}; "
                     f"not {', '.join(n for _, n in missing)}")
    return lines


def upgrade_hint() -> str:
    root = settings.BASE_DIR
    old = f"{tempfile.gettempdir()}/crucible-{BEFORE_SQUASH}"
    environment = f"CRUCIBLE_DATA_DIR={shlex.quote(str(settings.DATA_DIR))}"
    python = shlex.quote(sys.executable)
    return (
        f"Migrate it first with the code from before the squash (commit {BEFORE_SQUASH}), with the same "
        f"DATABASE_URL and DJANGO_SETTINGS_MODULE as here and from the same directory (a relative sqlite path "
        f"in DATABASE_URL is read from it), then migrate here again:\n"
        f"  git -C {shlex.quote(str(root))} worktree add {shlex.quote(old)} {BEFORE_SQUASH}\n"
        f"  {environment} {python} {shlex.quote(old + '/manage.py')} migrate\n"
        f"  git -C {shlex.quote(str(root))} worktree remove {shlex.quote(old)} && "
        f"{python} {shlex.quote(str(root / 'manage.py'))} migrate   (or make run)\n"
        "docs/design.md, \"Migrations\", says why.")
