"""create_run / cancel_run / resume_run and the Run state machine."""
import yaml
import pytest

from training.config import ConfigError
from webapp.runs.models import Run, TransitionError
from webapp.runs.services import create_run, resume_run, cancel_run

from tests.factories import make_problem_set


def test_create_run_merges_over_defaults_and_writes_its_own_run_dir(run, problem_set):
    run_dir = run.path
    assert run.status == "queued" and run.steps == 3
    assert run.config["ppo"]["clip_range"] == 0.2  # a default
    assert run.config["sampling"]["problems_per_step"] == 2  # the override
    on_disk = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert on_disk["problems"] == str(run_dir / "problems.jsonl")
    assert on_disk["train"]["steps"] == 3
    ids = [__import__("json").loads(l)["id"] for l in (run_dir / "problems.jsonl").read_text().splitlines()]
    assert "HumanEval/0" in ids and len(ids) == 4
    assert problem_set.runs.get() == run


def test_an_unknown_key_is_an_error_naming_the_dotted_field(user, problem_set):
    with pytest.raises(ConfigError) as e:
        create_run(user, "bad", problem_set, {"ppo": {"clip_rnage": 0.2}})
    assert e.value.field == "ppo.clip_rnage"
    with pytest.raises(ConfigError) as e:
        create_run(user, "bad", problem_set, {"ppo": {"clip_range": 3}})
    assert e.value.field == "ppo.clip_range"
    assert not Run.objects.exists()


def test_problems_come_from_the_problem_set_not_the_config(user, problem_set):
    with pytest.raises(ConfigError) as e:
        create_run(user, "bad", problem_set, {"problems": "/etc/passwd"})
    assert e.value.field == "problems"


def test_a_set_without_train_problems_is_refused(user):
    from tests.factories import problem_lines

    ps = make_problem_set(user, data=problem_lines(n_train=0, n_heldout=2))
    with pytest.raises(ConfigError) as e:
        create_run(user, "x", ps, {})
    assert e.value.field == "problem_set"


def test_lora_null_means_full_fine_tune(user, problem_set):
    run = create_run(user, "full", problem_set, {"model": {"lora": None}})
    assert run.config["model"]["lora"] is None


def test_cancel_of_a_queued_run_is_immediate_and_of_a_running_one_cooperative(run, user, problem_set):
    assert cancel_run(run) == "cancelled"
    other = create_run(user, "second", problem_set, {})
    assert other.claim(host="h", pid=1)
    assert cancel_run(other) == "cancelling"
    assert cancel_run(other) == "cancelling"
    other.finish("cancelled")
    with pytest.raises(TransitionError):
        cancel_run(other)


def test_resume_requeues_only_failed_or_cancelled_runs(run):
    with pytest.raises(TransitionError):
        resume_run(run)
    assert run.claim(host="h", pid=1)
    assert not run.claim(host="h", pid=2)  # a second supervisor never takes a running run
    run.finish("failed", "boom")
    assert not run.finish("succeeded")  # the first final status sticks
    resume_run(run)
    run.refresh_from_db()
    assert (run.status, run.error, run.resume_count) == ("queued", "", 1)
