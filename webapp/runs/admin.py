from django.contrib import admin

from .models import Candidate, Checkpoint, Eval, ProblemStat, Run, RunEvent, StepMetric


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "status", "step", "steps", "created", "finished")
    list_filter = ("status",)
    search_fields = ("name", "owner__username")
    readonly_fields = ("created", "started", "finished", "heartbeat", "events_offset", "events_seq")


@admin.register(RunEvent)
class RunEventAdmin(admin.ModelAdmin):
    list_display = ("run", "seq", "kind", "step")
    list_filter = ("kind",)


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "kind", "path", "size_bytes")


admin.site.register([StepMetric, ProblemStat, Candidate, Eval])
