"""problems 0001-0008 squashed into one initial migration (issue 32): ProblemSet, Problem, Probe (its model is in
webapp/problems/models.py; the probes app has no tables) and ProblemValidation as 0008 left them.

Left out: 0006, a data migration that gave the probes stored before the rename their ``solve_rate`` names
(``training.difficulty.with_new_names``). A fresh database has no probes to rewrite; one that ran it keeps them.
How ``replaces`` treats a database migrated before, and what a partly migrated one must do: docs/design.md,
"Migrations" (``webapp/core/checks.py`` refuses it in ``migrate``).
"""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [
        ("problems", "0001_initial"),
        ("problems", "0002_validation_progress"),
        ("problems", "0003_background_import"),
        ("problems", "0004_difficulty_probe"),
        ("problems", "0005_probe_heartbeat"),
        ("problems", "0006_probe_solve_rate"),
        ("problems", "0007_probe_trainer_job"),
        ("problems", "0008_heldout_share_and_exclusion"),
    ]

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ProblemSet',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('format', models.CharField(help_text='The format the importer read (native, humaneval, ...).', max_length=20)),
                ('source_filename', models.CharField(blank=True, max_length=255)),
                ('problem_count', models.PositiveIntegerField(default=0)),
                ('train_count', models.PositiveIntegerField(default=0)),
                ('heldout_count', models.PositiveIntegerField(default=0)),
                ('import_errors', models.JSONField(blank=True, default=list, help_text='Lines the importer refused: [{line, field, message}].')),
                ('import_status', models.CharField(choices=[('importing', 'Importing'), ('done', 'Done'), ('failed', 'Failed')], default='done', help_text='`importing` while a sandbox worker parses a large upload; `failed` when no problem came of it.', max_length=10)),
                ('import_read_bytes', models.BigIntegerField(default=0, help_text='Bytes of the stored upload read so far.')),
                ('import_total_bytes', models.BigIntegerField(default=0, help_text='Size of the upload as sent (compressed).')),
                ('import_lines', models.PositiveIntegerField(default=0, help_text='Lines read so far (decompressed).')),
                ('upload_path', models.CharField(blank=True, help_text='The stored upload a background import reads, relative to MEDIA_ROOT; cleared when it ends.', max_length=255)),
                ('validation_status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='pending', max_length=10)),
                ('validation_passed', models.PositiveIntegerField(default=0)),
                ('validation_failed', models.PositiveIntegerField(default=0)),
                ('validation_checked', models.PositiveIntegerField(default=0, help_text='Problems checked so far by the running validation (progress).')),
                ('validation_error', models.TextField(blank=True, help_text='Why the validation job itself failed.')),
                ('validation_started', models.DateTimeField(blank=True, null=True)),
                ('validation_finished', models.DateTimeField(blank=True, null=True)),
                ('validation_generation', models.PositiveIntegerField(default=0, help_text='Bumped by each validation request; a task for an older one stands down.')),
                ('heldout_share', models.FloatField(blank=True, help_text="The share of problems the user chose as held-out (seeded) for a set that brought none; null: the splits are the file's own.", null=True)),
                ('heldout_seed', models.PositiveIntegerField(default=0, help_text='The seed of that choice.')),
                ('excluded_count', models.PositiveIntegerField(default=0, help_text='Problems excluded from runs (kept here).')),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='problem_sets', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created', '-id'],
            },
        ),
        migrations.CreateModel(
            name='Problem',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveIntegerField(help_text='0-based order in the uploaded file.')),
                ('problem_id', models.CharField(help_text='The id from the uploaded file.', max_length=256)),
                ('split', models.CharField(db_index=True, max_length=10)),
                ('kind', models.CharField(max_length=10)),
                ('tags', models.JSONField(blank=True, default=list)),
                ('data', models.JSONField()),
                ('excluded', models.BooleanField(default=False, help_text='Left out of the runs launched afterwards (and of probes); kept in the set.')),
                ('problem_set', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='problems', to='problems.problemset')),
            ],
            options={
                'ordering': ['problem_set', 'position'],
                'constraints': [models.UniqueConstraint(fields=('problem_set', 'problem_id'), name='unique_problem_id_per_set')],
            },
        ),
        migrations.CreateModel(
            name='Probe',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('error', models.TextField(blank=True, default='')),
                ('worker_host', models.CharField(blank=True, default='', max_length=255)),
                ('worker_pid', models.IntegerField(blank=True, help_text='pid of the supervising task', null=True)),
                ('trainer_pid', models.IntegerField(blank=True, null=True)),
                ('heartbeat', models.DateTimeField(blank=True, null=True)),
                ('started', models.DateTimeField(blank=True, null=True)),
                ('finished', models.DateTimeField(blank=True, null=True)),
                ('model', models.CharField(help_text='The model as the user named it.', max_length=300)),
                ('adapter', models.CharField(blank=True, help_text='An adapter checkpoint run:<id>/step-<n>, or empty.', max_length=300)),
                ('samples', models.PositiveIntegerField()),
                ('split', models.CharField(default='all', max_length=10)),
                ('config', models.JSONField(blank=True, default=dict, help_text='The run-config sections the probe sampled with (sampling, model.dtype, sandbox).')),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='pending', max_length=10)),
                ('done', models.PositiveIntegerField(default=0, help_text='Problems probed so far (progress).')),
                ('total', models.PositiveIntegerField(default=0, help_text='Problems to probe.')),
                ('results', models.JSONField(blank=True, default=list, help_text="[{problem_id, samples, passed, pass_rate}] in the set's order, when done.")),
                ('summary', models.JSONField(blank=True, default=dict, help_text="The probe's summary line, when done.")),
                ('output_path', models.CharField(blank=True, help_text='The probe output, relative to PROBLEM_SETS_DIR.', max_length=500)),
                ('task_id', models.CharField(blank=True, max_length=64)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('requested_by', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='probes', to=settings.AUTH_USER_MODEL)),
                ('problem_set', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='probes', to='problems.problemset')),
            ],
            options={
                'ordering': ['-created', '-id'],
            },
        ),
        migrations.CreateModel(
            name='ProblemValidation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reference_passed', models.BooleanField(default=False)),
                ('empty_failed', models.BooleanField(default=False)),
                ('detail', models.TextField(blank=True)),
                ('reference_result', models.JSONField(blank=True, help_text='sandbox ExecutionResult.to_dict()', null=True)),
                ('empty_result', models.JSONField(blank=True, help_text='sandbox ExecutionResult.to_dict()', null=True)),
                ('finished', models.DateTimeField(auto_now=True)),
                ('problem', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='validation', to='problems.problem')),
            ],
        ),
    ]
