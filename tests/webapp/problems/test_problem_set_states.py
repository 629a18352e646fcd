"""ProblemSet's state changes: the import and validation state machines and the counts, each a method of the
model that refuses a change its state does not allow, naming the set and what it is."""
import pytest

from webapp.problems.models import Problem, ProblemSet, TransitionError

from tests.factories import make_problem_set, make_user


@pytest.fixture
def owner(db):
    return make_user("states")


@pytest.fixture
def importing(owner):
    return ProblemSet.objects.create(owner=owner, name="big", format="auto", import_status=ProblemSet.Import.IMPORTING)


def test_an_import_records_its_upload_and_progress_then_ends_done(importing):
    importing.attach_upload("problem-sets/1/upload", 1234)
    assert importing.record_import_progress(10, 600)
    importing.end_import(errors=[], lines=20, format="native")
    stored = ProblemSet.objects.get(pk=importing.pk)
    assert (stored.import_status, stored.format, stored.upload_path) == ("done", "native", "")
    assert (stored.import_lines, stored.import_read_bytes, stored.import_total_bytes) == (20, 1234, 1234)
    assert stored.validation_status == "pending"  # the caller queues the validation next


def test_an_import_with_no_problem_fails_and_so_does_its_validation(importing):
    errors = [{"line": 0, "field": None, "message": "big.jsonl has no problems"}]
    importing.end_import(errors=errors, lines=0, format=None)
    stored = ProblemSet.objects.get(pk=importing.pk)
    assert (stored.import_status, stored.validation_status) == ("failed", "failed")
    assert stored.validation_error == "nothing to validate: the import failed"
    assert stored.import_errors == errors


def test_an_ended_import_can_neither_end_again_nor_take_progress(importing):
    importing.end_import(errors=[], lines=3, format="native")
    with pytest.raises(TransitionError, match=rf"problem set {importing.pk}: an import can end only while it is "
                                              "importing; its import is done"):
        importing.end_import(errors=[], lines=3, format=None)
    with pytest.raises(TransitionError, match="an upload is attached only while it is importing"):
        importing.attach_upload("elsewhere", 1)
    assert not importing.record_import_progress(99, 99)  # a late progress report of the task is dropped
    assert ProblemSet.objects.get(pk=importing.pk).import_lines == 3


def test_problems_are_not_replaced_while_an_import_runs(importing):
    with pytest.raises(TransitionError, match=f"problem set {importing.pk} is being imported"):
        importing.replace_source(format="native", errors=[])


def test_a_validation_runs_through_its_states_and_counts_its_chunks(owner):
    ps = make_problem_set(owner)
    generation = ps.request_validation()
    assert (ps.validation_status, ps.validation_generation) == ("pending", generation)
    assert ps.start_validation(generation)
    assert ps.record_validation_chunk(generation, checked=3, passed=2)
    assert ps.record_validation_chunk(generation, checked=1, passed=1)
    assert ps.finish_validation(generation)
    stored = ProblemSet.objects.get(pk=ps.pk)
    assert (stored.validation_status, stored.validation_checked, stored.validation_passed,
            stored.validation_failed) == ("done", 4, 3, 1)
    assert stored.validation_finished is not None


def test_a_task_of_an_older_validation_request_stands_down(owner):
    ps = make_problem_set(owner)
    old = ps.request_validation()
    assert ps.start_validation(old)
    new = ps.request_validation()  # the user asked again while it ran
    assert new == old + 1
    assert not ps.record_validation_chunk(old, checked=5, passed=5)
    assert not ps.finish_validation(old)
    assert not ps.start_validation(old)
    stored = ProblemSet.objects.get(pk=ps.pk)
    assert (stored.validation_status, stored.validation_checked) == ("pending", 0)


def test_a_finished_validation_starts_again_only_when_forced(owner):
    ps = make_problem_set(owner)
    generation = ps.request_validation()
    ps.start_validation(generation)
    ps.finish_validation(generation, error="RuntimeError: no sandbox")
    assert ps.validation_status == "failed" and ps.validation_error == "RuntimeError: no sandbox"
    assert not ps.start_validation(generation)  # a redelivered task: the work is done
    assert ps.start_validation(generation, force=True)
    assert (ps.validation_status, ps.validation_error) == ("running", "")


def test_a_validation_that_is_not_running_takes_no_progress_and_does_not_finish(owner):
    ps = make_problem_set(owner)
    generation = ps.request_validation()
    with pytest.raises(TransitionError, match=rf"problem set {ps.pk}: progress is recorded only while its "
                                              "validation runs; it is pending"):
        ps.record_validation_chunk(generation, checked=1, passed=1)
    with pytest.raises(TransitionError, match="a validation can finish only while its validation runs; it is pending"):
        ps.finish_validation(generation)


def test_a_set_whose_import_is_not_done_cannot_be_validated(importing):
    with pytest.raises(TransitionError, match=f"problem set {importing.pk} has no problems to validate: its "
                                              "import is importing"):
        importing.request_validation()


def test_excluding_a_problem_and_choosing_a_split_keep_the_counts(owner):
    ps = make_problem_set(owner)
    ids = list(ps.problems.values_list("problem_id", flat=True))
    assert len(ids) >= 2
    ps.choose_heldout(0.5, 7)
    ps.resplit({ids[0]})
    assert (ps.heldout_share, ps.heldout_seed, ps.heldout_count, ps.train_count) == (0.5, 7, 1, len(ids) - 1)
    moved = ps.problems.get(problem_id=ids[0])
    assert moved.split == moved.data["split"] == "heldout"
    ps.set_excluded(moved, True)
    assert (ps.excluded_count, ps.heldout_count, ps.problem_count) == (1, 0, len(ids))
    ps.choose_heldout(0)
    assert (ps.heldout_share, ps.heldout_seed) == (None, 0)


def test_a_problem_of_another_set_is_not_excluded_through_this_one(owner):
    ps, other = make_problem_set(owner), make_problem_set(owner, "other")
    stranger = other.problems.first()
    with pytest.raises(TransitionError, match=f"problem {stranger.pk} is not one of problem set {ps.pk}'s"):
        ps.set_excluded(stranger, True)
    assert not Problem.objects.get(pk=stranger.pk).excluded
