"""The Channels group names, one function each: whoever sends to a group and the consumer that joins
it build its name here, so they cannot disagree."""


def run_group(run_id: int) -> str:
    """A run's page and websocket (``/ws/runs/<id>/``): its events and status changes."""
    return f"run-{run_id}"


def user_group(user_id: int) -> str:
    """A user's open pages (``/ws/notifications/``): their runs' states, their sets' imports,
    validations and probes."""
    return f"user-{user_id}"
