from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0004_run_notes'),
    ]

    operations = [
        migrations.AddField(
            model_name='candidate',
            name='penalized_flags',
            field=models.JSONField(blank=True, default=list, help_text='the flags of reward.penalize_flags it carries (in any execution): they set its total reward to 0'),
        ),
    ]
