"""The Run columns services and views used to write themselves, now the model's methods: the set-up of a new
run, the user's name and notes, and the new supervisor task id of a resumed run."""
import pytest

from webapp.runs.models import Run, TransitionError


def test_a_new_run_is_set_up_once(run, tmp_path):
    assert run.run_dir and run.config["problems"].endswith("problems.jsonl")  # create_run set it up
    with pytest.raises(TransitionError, match=f"run {run.pk} is already set up in {run.run_dir}"):
        run.set_up(config={}, run_dir=str(tmp_path))
    assert Run.objects.get(pk=run.pk).config == run.config


def test_only_a_queued_run_is_set_up(user, problem_set, tmp_path):
    bare = Run.objects.create(owner=user, name="bare", problem_set=problem_set)
    assert bare.claim(host="h", pid=1)
    with pytest.raises(TransitionError, match=f"run {bare.pk} is running; only a new, queued run is set up"):
        bare.set_up(config={"a": 1}, run_dir=str(tmp_path))
    assert Run.objects.get(pk=bare.pk).run_dir == ""


def test_editing_a_run_changes_only_its_name_and_notes(run):
    assert run.claim(host="h", pid=1)
    run.edit(name="renamed", notes="lr sweep")
    stored = Run.objects.get(pk=run.pk)
    assert (stored.name, stored.notes, stored.status, stored.worker_pid) == ("renamed", "lr sweep", "running", 1)


def test_a_resumed_run_gets_a_new_supervisor_task_id_with_its_status(run):
    first = run.celery_task_id
    assert run.claim(host="h", pid=1)
    run.finish("failed", "boom")
    run.requeue()
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == "queued" and stored.celery_task_id == run.celery_task_id != first
    assert len(stored.celery_task_id) == 32
