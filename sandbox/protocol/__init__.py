"""The protocol between the host and a sandboxed worker, shared by every backend.

- `channel`: what a backend's worker channel offers (start an execution, end it, report how it
  ended), the frames on it, and `WorkerBroken`;
- `driver`: the host side of one execution over a channel (`drive_execution`): requests to the
  child, trusted verdicts, captured output, the deadline, the `ExecutionResult`.

The worker's side is sandbox/harness.py, which runs inside the sandbox on the standard library only.
"""
