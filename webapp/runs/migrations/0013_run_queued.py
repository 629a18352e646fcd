"""``Run.queued``: when a run was last put on the gpu queue, its place in line (a resume queues it again,
behind the jobs queued meanwhile). Runs stored before it were last queued when created or resumed; their
creation time is the best that is known."""
import django.utils.timezone
from django.db import migrations, models


def from_created(apps, schema_editor):
    apps.get_model("runs", "Run").objects.update(queued=models.F("created"))


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0001_squashed_0012_reward_normalize_mode"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="queued",
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="when the run was last put on "
                                       "the gpu queue (created, or resumed): its place in line"),
        ),
        migrations.RunPython(from_created, migrations.RunPython.noop),
    ]
