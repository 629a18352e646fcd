"""problems 0001-0008 and runs 0001-0012, squashed (issue 32): the models match them, a database that applied
every old migration takes the squashes as applied, and one that applied only some is refused with the way up.

The test database itself is the fresh case: it is migrated from the squashes. The old cases are simulated on it
by rewriting django_migrations (the schema is the same: docs/design.md, "Migrations")."""
import tempfile

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder

from webapp.core.checks import BEFORE_SQUASH

from tests.factories import make_user

SQUASHES = {"problems": "0001_squashed_0008_heldout_share_and_exclusion",
            "runs": "0001_squashed_0012_reward_normalize_mode"}
# What a database migrated before the squash (commit BEFORE_SQUASH) has recorded, in the order applied.
OLD = {
    "problems": ["0001_initial", "0002_validation_progress", "0003_background_import", "0004_difficulty_probe",
                 "0005_probe_heartbeat", "0006_probe_solve_rate", "0007_probe_trainer_job",
                 "0008_heldout_share_and_exclusion"],
    "runs": ["0001_initial", "0002_auto_resume", "0003_candidate_truncated", "0004_run_notes",
             "0005_candidate_penalized_flags", "0006_candidate_phase", "0007_set_aside", "0008_summarize_stored_events",
             "0009_candidate_turns", "0010_problem_stat_solve_rate", "0011_problem_events_solve_rate",
             "0012_reward_normalize_mode"],
}


def recorded() -> set[tuple[str, str]]:
    return set(MigrationRecorder(connection).applied_migrations())


def as_if_applied(old: list[tuple[str, str]]) -> None:
    """django_migrations as the code before the squash left it: of the old names only ``old``, and not the
    squashes (applying a squash records every name it replaces)."""
    recorder = MigrationRecorder(connection)
    for app, name in SQUASHES.items():
        for key in [(app, name), *replaced(app)]:
            recorder.record_unapplied(*key)
    for app, name in old:
        recorder.record_applied(app, name)


def replaced(app: str) -> list[tuple[str, str]]:
    return [(app, name) for name in OLD[app]]


def test_each_squash_replaces_every_old_migration_of_its_app():
    disk = MigrationExecutor(None).loader.disk_migrations
    for app, name in SQUASHES.items():
        assert disk[(app, name)].replaces == replaced(app)
        assert not set(replaced(app)) & set(disk)  # the old files are gone


@pytest.mark.django_db
def test_the_models_need_no_migration_beyond_the_squashes():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # SystemExit(1) on a change


@pytest.mark.django_db
def test_a_database_that_applied_every_old_migration_takes_the_squashes_as_applied_and_is_not_touched():
    user = make_user("kept")
    as_if_applied(replaced("problems") + replaced("runs"))
    executor = MigrationExecutor(connection)
    assert {(app, name) for app, name in SQUASHES.items()} <= set(executor.loader.applied_migrations)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []
    before = recorded()
    call_command("migrate", skip_checks=False, verbosity=0)  # as manage.py runs it, with its checks
    # Only the squashes' own names were recorded beside the old ones; no table was made again.
    assert recorded() - before == {(app, name) for app, name in SQUASHES.items()}
    assert type(user).objects.filter(pk=user.pk, username="kept").exists()


@pytest.mark.django_db
def test_a_database_that_applied_only_some_old_migrations_is_refused_with_the_way_up():
    runs = replaced("runs")
    as_if_applied(replaced("problems") + runs[:9])  # stopped at runs 0009_candidate_turns
    before = recorded()
    with pytest.raises(SystemCheckError) as refused:
        call_command("migrate", skip_checks=False, verbosity=0)
    message = str(refused.value)
    assert (f"runs {SQUASHES['runs']}: applied {', '.join(name for _, name in runs[:9])}; "
            "not 0010_problem_stat_solve_rate, 0011_problem_events_solve_rate, 0012_reward_normalize_mode") in message
    assert f"problems {SQUASHES['problems']}" not in message  # applied whole
    assert f"commit {BEFORE_SQUASH}" in message
    assert f"worktree add {tempfile.gettempdir()}/crucible-{BEFORE_SQUASH} {BEFORE_SQUASH}" in message
    # the old code's manage.py by its path, from this directory: a relative sqlite DATABASE_URL names the same file
    assert f"{tempfile.gettempdir()}/crucible-{BEFORE_SQUASH}/manage.py migrate" in message and "cd " not in message
    assert recorded() == before
