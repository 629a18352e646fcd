"""The evaluations page's "New evaluation" form and the run page's "Evaluate before/after" button."""
from __future__ import annotations

from django import forms
from django.conf import settings

from training.suites import SUITES

from webapp.probes.forms import model_choices
from webapp.problems.models import ProblemSet

from .services import DEFAULT_SAMPLES, SPLITS


def benchmark_choices(user) -> list:
    """The suites, then the user's problem sets (``set:<id>``)."""
    suites = [(name, suite.title) for name, suite in SUITES.items()]
    sets = [(f"set:{ps.pk}", ps.name) for ps in ProblemSet.objects.visible_to(user).order_by("-id")[:100]]
    return [("Benchmark suites", suites)] + ([("Your problem sets", sets)] if sets else [])


class BenchmarkFields(forms.Form):
    benchmark = forms.ChoiceField(help_text="A suite shipped with the server, or one of your problem sets.")
    limit = forms.IntegerField(required=False, min_value=1,
                               help_text="Only the suite's first N problems (empty: all of them).")
    split = forms.ChoiceField(choices=[(s, s) for s in SPLITS], initial="all",
                              help_text="A problem set's problems to evaluate.")
    samples = forms.IntegerField(min_value=1, initial=DEFAULT_SAMPLES, help_text="n: samples per problem.")
    ks = forms.CharField(required=False, help_text="k of pass@k, comma-separated (empty: 1, 2, 4, ..., n).")
    seed = forms.IntegerField(min_value=0, initial=0, help_text="The same seed samples the same candidates.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["benchmark"].choices = benchmark_choices(user)
        self.fields["samples"].max_value = settings.PROBE_MAX_SAMPLES
        self.fields["samples"].widget.attrs.update(min=1, max=settings.PROBE_MAX_SAMPLES)

    def clean_ks(self) -> list[int] | None:
        text = self.cleaned_data.get("ks", "").strip()
        if not text:
            return None
        try:
            return [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise forms.ValidationError(f"give whole numbers separated by commas, e.g. 1,10; got {text!r}") from None

    def target(self) -> dict:
        """``suite``/``problem_set``/``split`` for ``services.request_evaluation``."""
        benchmark = self.cleaned_data["benchmark"]
        if benchmark.startswith("set:"):
            return {"suite": None, "split": self.cleaned_data["split"],
                    "problem_set": ProblemSet.objects.visible_to(self.user).get(pk=int(benchmark[4:]))}
        limit = self.cleaned_data.get("limit")
        return {"suite": f"{benchmark}:{limit}" if limit else benchmark, "problem_set": None, "split": "all"}


class EvalForm(BenchmarkFields):
    model = forms.ChoiceField(help_text="A preset's model, or a checkpoint of one of your runs.")
    field_order = ["model", "benchmark", "limit", "split", "samples", "ks", "seed"]

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, user=user, **kwargs)
        self.fields["model"].choices = model_choices(user)
