"""runs 0001-0012 squashed into one initial migration (issue 32): a Run and its ProblemStat, Eval, Checkpoint,
Candidate, RunEvent and StepMetric rows as 0012 left them (0010's rename: ``pass_rate`` is ``solve_rate`` here).

Left out: the data migrations, which rewrote stored rows that a fresh database does not have, while one
that ran them keeps what they wrote: 0008 (stored ``problem``/``eval`` events became their summaries, with
candidate rows where none were), 0011 (stored ``problem`` events got ``solve_rate``), 0012 (stored configs'
boolean ``reward.normalize`` became ``reward.weighted_mean``). Databases migrated before the squash, and
partly migrated ones: docs/design.md, "Migrations".
"""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [
        ("runs", "0001_initial"),
        ("runs", "0002_auto_resume"),
        ("runs", "0003_candidate_truncated"),
        ("runs", "0004_run_notes"),
        ("runs", "0005_candidate_penalized_flags"),
        ("runs", "0006_candidate_phase"),
        ("runs", "0007_set_aside"),
        ("runs", "0008_summarize_stored_events"),
        ("runs", "0009_candidate_turns"),
        ("runs", "0010_problem_stat_solve_rate"),
        ("runs", "0011_problem_events_solve_rate"),
        ("runs", "0012_reward_normalize_mode"),
    ]

    initial = True

    dependencies = [
        ('problems', '0001_squashed_0008_heldout_share_and_exclusion'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Run',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('error', models.TextField(blank=True, default='')),
                ('worker_host', models.CharField(blank=True, default='', max_length=255)),
                ('worker_pid', models.IntegerField(blank=True, help_text='pid of the supervising task', null=True)),
                ('trainer_pid', models.IntegerField(blank=True, null=True)),
                ('heartbeat', models.DateTimeField(blank=True, null=True)),
                ('started', models.DateTimeField(blank=True, null=True)),
                ('finished', models.DateTimeField(blank=True, null=True)),
                ('name', models.CharField(max_length=200)),
                ('notes', models.TextField(blank=True, default='', help_text="the user's notes or tags, free text")),
                ('config', models.JSONField(default=dict, help_text='the full merged run config (training.config)')),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('cancelling', 'Cancelling'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], db_index=True, default='queued', max_length=20)),
                ('step', models.IntegerField(default=0, help_text='last RL step reported by the trainer')),
                ('steps', models.IntegerField(default=0, help_text='train.steps of the config')),
                ('celery_task_id', models.CharField(blank=True, default='', max_length=64)),
                ('run_dir', models.CharField(blank=True, default='', max_length=500)),
                ('events_offset', models.BigIntegerField(default=0, help_text='bytes of events.jsonl already ingested')),
                ('events_seq', models.IntegerField(default=0, help_text='lines of events.jsonl already ingested')),
                ('resume_count', models.IntegerField(default=0)),
                ('auto_resume', models.BooleanField(default=False, help_text='stopped by a gpu worker shutdown: resumed automatically when a gpu worker starts')),
                ('auto_resumes', models.IntegerField(default=0, help_text='resumes made automatically after worker shutdowns')),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='runs', to=settings.AUTH_USER_MODEL)),
                ('problem_set', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='runs', to='problems.problemset')),
            ],
            options={
                'ordering': ['-created'],
            },
        ),
        migrations.CreateModel(
            name='ProblemStat',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('problem_id', models.CharField(max_length=500)),
                ('split', models.CharField(default='train', max_length=20)),
                ('solve_rate', models.FloatField(default=0.0, help_text="the share of the problem's candidates (train: at its latest step; held-out: at its latest evaluation) that passed every test")),
                ('history', models.JSONField(default=list, help_text='[[step, solve_rate], ...] ordered by step')),
                ('zero_variance_groups', models.IntegerField(default=0, help_text='steps whose candidates all got one reward')),
                ('zero_variance_steps', models.JSONField(default=list)),
                ('set_aside_steps', models.JSONField(blank=True, default=list, help_text='steps whose group was sampled but left out of the update (dynamic sampling, drop_zero_variance_groups)')),
                ('last_step', models.IntegerField(default=0)),
                ('solve_rate_turn1', models.FloatField(blank=True, help_text='multi-turn runs (sampling.turns > 1): like solve_rate, counting only first turns; null for a one-turn run', null=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='problem_stats', to='runs.run')),
            ],
            options={
                'ordering': ['problem_id'],
                'constraints': [models.UniqueConstraint(fields=('run', 'problem_id'), name='problem_stat_unique')],
            },
        ),
        migrations.CreateModel(
            name='Eval',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('step', models.IntegerField()),
                ('split', models.CharField(default='heldout', max_length=20)),
                ('pass_at_1', models.FloatField(blank=True, null=True)),
                ('pass_at_1_turn1', models.FloatField(blank=True, help_text='multi-turn runs: pass@1 of the first turns alone (pass_at_1 counts a sample passing by its last turn)', null=True)),
                ('pass_at_k', models.JSONField(default=dict)),
                ('time', models.FloatField(blank=True, null=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='evals', to='runs.run')),
            ],
            options={
                'ordering': ['step', 'id'],
                'constraints': [models.UniqueConstraint(fields=('run', 'step', 'split'), name='eval_unique')],
            },
        ),
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('step', models.IntegerField()),
                ('kind', models.CharField(choices=[('adapter', 'Adapter'), ('merged', 'Merged'), ('full', 'Full')], max_length=20)),
                ('path', models.CharField(help_text='relative to the run dir', max_length=500)),
                ('size_bytes', models.BigIntegerField(default=0)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='runs.run')),
            ],
            options={
                'ordering': ['step', 'kind'],
                'constraints': [models.UniqueConstraint(fields=('run', 'path'), name='checkpoint_path_unique')],
            },
        ),
        migrations.CreateModel(
            name='Candidate',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('phase', models.CharField(choices=[('train', 'Train'), ('eval', 'Eval')], default='train', help_text='train: sampled for an RL step; eval: sampled by the held-out evaluation at that step (step 0: before training)', max_length=10)),
                ('step', models.IntegerField()),
                ('problem_id', models.CharField(max_length=500)),
                ('index', models.IntegerField()),
                ('code', models.TextField(blank=True, default='')),
                ('reward', models.FloatField(blank=True, null=True)),
                ('rewards', models.JSONField(default=dict)),
                ('result', models.JSONField(default=dict)),
                ('passed', models.BooleanField(default=False)),
                ('status', models.CharField(blank=True, default='', help_text='execution outcome', max_length=20)),
                ('truncated', models.BooleanField(default=False, help_text='generation hit max_new_tokens (cut off)')),
                ('overlong_penalty', models.FloatField(blank=True, help_text='reward.overlong soft: the length penalty included in reward (in [-1, 0]); null when none applied', null=True)),
                ('penalized_flags', models.JSONField(blank=True, default=list, help_text='the flags of reward.penalize_flags it carries (in any execution): they set its total reward to 0')),
                ('set_aside', models.CharField(blank=True, default='', help_text='why its group was left out of the update (zero_variance, surplus); empty when the update used it', max_length=20)),
                ('turns', models.JSONField(blank=True, default=list, help_text="multi-turn repair: every turn, {reply, code, feedback, result, reward, rewards, truncated, flags}; the row's own fields are the last turn's; empty for a one-turn candidate")),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='candidates', to='runs.run')),
            ],
            options={
                'ordering': ['step', 'index'],
                'indexes': [models.Index(fields=['run', 'problem_id', 'step'], name='runs_candid_run_id_69c3e7_idx'), models.Index(fields=['run', 'status'], name='runs_candid_run_id_da3c6b_idx')],
            },
        ),
        migrations.CreateModel(
            name='RunEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.IntegerField()),
                ('kind', models.CharField(max_length=20)),
                ('step', models.IntegerField(blank=True, null=True)),
                ('payload', models.JSONField()),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='events', to='runs.run')),
            ],
            options={
                'ordering': ['seq'],
                'indexes': [models.Index(fields=['run', 'step'], name='runs_runeve_run_id_d559fa_idx')],
                'constraints': [models.UniqueConstraint(fields=('run', 'seq'), name='run_event_seq_unique')],
            },
        ),
        migrations.CreateModel(
            name='StepMetric',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('step', models.IntegerField()),
                ('metrics', models.JSONField(default=dict)),
                ('time', models.FloatField(blank=True, help_text='Unix time of the step event', null=True)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='step_metrics', to='runs.run')),
            ],
            options={
                'ordering': ['step'],
                'constraints': [models.UniqueConstraint(fields=('run', 'step'), name='step_metric_unique')],
            },
        ),
    ]
