"""Stored run configs from before ``reward.normalize`` took ``sum | per_component`` hold it as a boolean
(divide the weighted sum by the sum of weights), which is now ``reward.weighted_mean``: rewritten as
``training.config.RewardConfig.upgrade`` reads them, so a clone, a resume or a re-scoring of an old run starts from
today's spelling (and a clone's form shows the mode, not a boolean, in ``reward.normalize``)."""
from django.db import migrations


def upgrade(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    for run in Run.objects.filter(config__reward__has_key="normalize").iterator(chunk_size=500):
        reward = run.config.get("reward") if isinstance(run.config, dict) else None
        if not isinstance(reward, dict) or not isinstance(reward.get("normalize"), bool):
            continue
        run.config["reward"] = {**reward, "normalize": "sum", "weighted_mean": reward["normalize"]}
        run.save(update_fields=["config"])


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0011_problem_events_solve_rate"),
    ]

    operations = [
        migrations.RunPython(upgrade, migrations.RunPython.noop),
    ]
