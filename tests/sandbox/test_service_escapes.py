"""The conformance suite's containment and escape attempts, run through `python -m sandbox serve`:
a candidate sent over HTTP is held exactly as one run in-process (same tests, same assertions)."""

from __future__ import annotations

import pytest

from sandbox.limits import Limits
from sandbox.remote import RemoteRunner
from sandbox.runner import Candidate

from .replicas import TOKEN, replicas
from .test_conformance import (  # noqa: F401  (collected here again, against the service)
    test_a_fork_bomb_is_contained,
    test_an_endless_fork_bomb_ends_at_the_deadline,
    test_a_thread_bomb_is_contained,
    test_a_memory_bomb_ends_with_status_memory,
    test_a_memory_bomb_split_across_children_is_contained,
    test_a_stdout_flood_ends_with_output_limit,
    test_a_stderr_flood_ends_with_output_limit,
    test_one_big_file_is_capped,
    test_many_files_are_capped_and_wiped_before_the_next_execution,
    test_shared_memory_files_are_wiped_before_the_next_execution,
    test_network_to_loopback_services_is_blocked,
    test_network_to_the_outside_is_blocked,
    test_the_workers_environment_secrets_are_not_visible,
    test_other_processes_are_not_visible_in_proc,
    test_files_outside_the_scratch_dir_cannot_be_read,
    test_nothing_outside_the_scratch_dir_can_be_written,
    test_the_only_writable_places_are_the_scratch_dir,
    test_the_hosts_temporary_files_are_not_visible,
    test_a_double_forked_daemon_does_not_outlive_the_run,
    test_killing_the_parent_changes_nothing,
    test_an_object_equal_to_everything_fails,
    test_a_builtin_subclass_with_a_lying_eq_fails,
    test_monkeypatched_builtins_do_not_change_verdicts,
    test_exiting_before_the_tests_gets_no_credit,
    test_exiting_during_the_tests_fails_the_rest,
    test_patching_unittest_and_printing_passed_gets_no_credit,
    test_writing_fake_replies_on_the_harness_channel_gets_no_credit,
    test_the_expected_values_never_reach_the_sandbox,
    test_a_statement_test_that_raises_fails,
    test_privileged_syscalls_are_refused,
    test_flooding_the_harness_channel_gets_no_credit,
    test_loop_tests_are_decided_outside_the_sandbox,
    test_a_loop_test_fails_on_the_first_wrong_value,
    test_each_execution_gets_fresh_random_state_and_honest_streams,
    test_interrupting_the_worker_changes_nothing,
)

pytestmark = pytest.mark.e2e  # the escapes run on a `python -m sandbox serve` replica


class ServiceExecutor:
    """The `Executor.run` call of the conformance suite, answered by a service replica."""

    backend_id = "service"

    def __init__(self, url: str):
        self.url = url

    def run(self, problem, code: str, limits: Limits | None = None, **_: object):
        limits = limits or Limits.for_problem(problem)
        carried = Limits(time_limit_s=limits.time_limit_s, memory_mb=limits.memory_mb)
        if limits != carried:
            pytest.skip("the service carries time and memory limits only; this test sets others")
        runner = RemoteRunner([self.url], TOKEN, timeout_s=limits.time_limit_s, memory_mb=limits.memory_mb)
        return runner.run_batch({problem.id: problem}, [Candidate(problem_id=problem.id, code=code)])[0]


@pytest.fixture(scope="module")
def executor():
    with replicas(1, workers=1) as started:
        yield ServiceExecutor(started[0].url)
