"""Probes stored before the rename (``pass_rate``, ``mean_pass_rate`` only) get the new names beside
the old ones, as ``training.difficulty`` reads a probe file: the readers then take what is stored."""
from django.db import migrations


def upgrade(apps, schema_editor):
    from training.difficulty import with_new_names

    Probe = apps.get_model("problems", "Probe")
    for probe in Probe.objects.exclude(summary={}).exclude(summary__has_key="mean_solve_rate").iterator():
        probe.summary = with_new_names(probe.summary)
        probe.results = [with_new_names(r) if isinstance(r, dict) else r for r in probe.results]
        probe.save(update_fields=["summary", "results"])


class Migration(migrations.Migration):

    dependencies = [
        ("problems", "0005_probe_heartbeat"),
    ]

    operations = [
        migrations.RunPython(upgrade, migrations.RunPython.noop),
    ]
