from django.contrib import admin

from .models import Problem, ProblemSet, ProblemValidation


@admin.register(ProblemSet)
class ProblemSetAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "format", "problem_count", "validation_status", "created")
    list_filter = ("validation_status", "format")
    search_fields = ("name", "owner__username")
    # Written only by ProblemSet's methods (the import and validation state machines, the counts that follow
    # the problems): the admin shows them.
    readonly_fields = ("format", "problem_count", "train_count", "heldout_count", "excluded_count", "import_errors",
                       "import_status", "import_read_bytes", "import_total_bytes", "import_lines", "upload_path",
                       "validation_status", "validation_passed", "validation_failed", "validation_checked",
                       "validation_error", "validation_started", "validation_finished", "validation_generation",
                       "heldout_share", "heldout_seed")


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ("problem_id", "problem_set", "split", "kind", "position")
    list_filter = ("split", "kind")
    search_fields = ("problem_id",)
    raw_id_fields = ("problem_set",)
    readonly_fields = ("split", "excluded")  # ProblemSet.resplit / set_excluded keep the set's counts with them


@admin.register(ProblemValidation)
class ProblemValidationAdmin(admin.ModelAdmin):
    list_display = ("problem", "reference_passed", "empty_failed", "finished")
    list_filter = ("reference_passed", "empty_failed")
    raw_id_fields = ("problem",)
