from django.contrib import admin

from .models import Candidate, Checkpoint, Eval, ProblemStat, Run, RunEvent, StepMetric


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "status", "step", "steps", "created", "finished")
    list_filter = ("status",)
    search_fields = ("name", "owner__username")
    # Written only by Run's methods (its state transitions, the supervisor's bookkeeping): the admin shows them.
    readonly_fields = ("created", "started", "finished", "heartbeat", "events_offset", "events_seq", "status", "step",
                       "steps", "error", "worker_host", "worker_pid", "trainer_pid", "celery_task_id", "run_dir", "config",
                       "resume_count", "auto_resume", "auto_resumes")


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("run", "seq", "kind", "step")
    list_filter = ("kind",)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "kind", "path", "size_bytes")


admin.site.register([StepMetric, ProblemStat, Candidate, Eval])
