"""Stored ``problem`` events from before the rename (``pass_rate`` only) get ``solve_rate`` (and a
multi-turn one ``solve_rate_turn1``), as ``training.events.parse_event`` reads them: the replay then
sends what is stored, and no reader patches the old name any more."""
from django.db import migrations


def upgrade(apps, schema_editor):
    from training.events import EventError, parse_event

    RunEvent = apps.get_model("runs", "RunEvent")
    old = RunEvent.objects.filter(kind="problem").exclude(payload__has_key="solve_rate")
    for event in old.iterator(chunk_size=500):
        if not isinstance(event.payload, dict):
            continue
        try:
            event.payload = parse_event(event.payload).to_dict()
        except EventError:  # stored as written because it never parsed: left as it is
            continue
        event.save(update_fields=["payload"])


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0010_problem_stat_solve_rate"),
    ]

    operations = [
        migrations.RunPython(upgrade, migrations.RunPython.noop),
    ]
