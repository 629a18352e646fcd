from django.contrib import admin

from .models import Problem, ProblemSet, ProblemValidation


@admin.register(ProblemSet)
class ProblemSetAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "format", "problem_count", "validation_status", "created")
    list_filter = ("validation_status", "format")
    search_fields = ("name", "owner__username")


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ("problem_id", "problem_set", "split", "kind", "position")
    list_filter = ("split", "kind")
    search_fields = ("problem_id",)
    raw_id_fields = ("problem_set",)


@admin.register(ProblemValidation)
class ProblemValidationAdmin(admin.ModelAdmin):
    list_display = ("problem", "reference_passed", "empty_failed", "finished")
    list_filter = ("reference_passed", "empty_failed")
    raw_id_fields = ("problem",)
