"""A durable job's task registered from its service (webapp.core.jobs.DurableJob.register)."""
import pytest

from tests.factories import make_problem_set
from webapp.problems.tasks import import_upload


def test_the_task_returns_the_outcome_field_of_the_row_its_service_returns(user):
    ps = make_problem_set(user)
    assert import_upload(ps.pk) == ps.import_status == "done"  # a redelivered task: the work is done


def test_the_task_returns_none_when_the_row_is_gone(user):
    ps = make_problem_set(user)
    pk = ps.pk
    ps.delete()
    assert import_upload(pk) is None


def test_the_task_keeps_the_services_name_and_docstring():
    assert import_upload.name == "problems.import_upload"
    assert import_upload.run.__name__ == "import_problem_set"
    assert "the body of `problems.import_upload`" in import_upload.__doc__


def test_a_call_with_arguments_the_service_does_not_take_is_refused_where_it_is_made():
    with pytest.raises(TypeError):
        import_upload.delay(1, 2, 3, unknown=True)  # Celery's argument check, before anything is sent
