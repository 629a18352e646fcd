"""The set page's "Estimate difficulty" form."""
from django import forms
from django.conf import settings

from webapp.runs.model_refs import MODELS_PREFIX, installed_model_dir, installed_models
from webapp.runs.models import Checkpoint
from webapp.runs.presets import presets


class ProbeForm(forms.Form):
    """"Estimate difficulty": a model the user may name (preset/installed models, their own checkpoints)
    and a bounded sample count; `services.request_probe` checks the model again as the run form does."""

    model = forms.ChoiceField(help_text="The model whose pass rates to measure: a preset's model, or a checkpoint "
                                        "of one of your runs (sampled with that run's settings).")
    samples = forms.IntegerField(min_value=1, initial=8,
                                 help_text="Candidates sampled per problem; a pass rate is passed / samples.")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].choices = model_choices(user)
        self.fields["samples"].max_value = settings.PROBE_MAX_SAMPLES
        self.fields["samples"].validators.append(_at_most(settings.PROBE_MAX_SAMPLES))
        self.fields["samples"].widget.attrs.update(min=1, max=settings.PROBE_MAX_SAMPLES)


def _at_most(limit: int):
    def check(value):
        if value is not None and value > limit:
            raise forms.ValidationError(f"at most {limit} (this server's CRUCIBLE_PROBE_MAX_SAMPLES)")
    return check


def model_choices(user) -> list:
    """Grouped choices: the presets' models and the other installed ones, then the user's checkpoints."""
    models: dict[str, str] = {}
    for preset in presets():
        name = preset["config"].get("model", {}).get("name_or_path")
        if name and not (name.startswith(MODELS_PREFIX) and installed_model_dir(name[len(MODELS_PREFIX):]) is None):
            models.setdefault(name, f"{name} ({preset['title']})")
    for name in installed_models():
        models.setdefault(MODELS_PREFIX + name, MODELS_PREFIX + name)
    checkpoints = {}
    for c in (Checkpoint.objects.filter(run__owner=user).select_related("run").order_by("-run_id", "-step")[:100]):
        checkpoints.setdefault(f"run:{c.run_id}/step-{c.step}", f"run #{c.run_id} {c.run.name}, step {c.step}")
    choices = [("Models", list(models.items()))]
    if checkpoints:
        choices.append(("Checkpoints of your runs", list(checkpoints.items())))
    return choices
