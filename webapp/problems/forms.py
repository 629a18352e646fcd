from django import forms
from django.conf import settings

from webapp.runs.model_refs import MODELS_PREFIX, installed_model_dir, installed_models
from webapp.runs.models import Checkpoint
from webapp.runs.presets import presets

from .curation import MAX_HELDOUT_SHARE
from .services import UPLOAD_FORMATS

FORMAT_LABELS = {"auto": "Detect automatically", "native": "Crucible native JSONL", "humaneval": "HumanEval",
                 "mbpp": "MBPP", "apps": "APPS", "codecontests": "CodeContests"}


class UploadForm(forms.Form):
    name = forms.CharField(max_length=200, required=False,
                           help_text="Defaults to the file name.")
    # An empty file is the importer's to refuse, in the same words and place as a file of blank lines.
    file = forms.FileField(allow_empty_file=True,
                           help_text="JSON Lines (.jsonl) or gzip-compressed (.jsonl.gz), one problem per line.")
    format = forms.ChoiceField(choices=[(f, FORMAT_LABELS[f]) for f in UPLOAD_FORMATS], initial="auto")
    heldout_share = forms.FloatField(
        required=False, min_value=0, max_value=MAX_HELDOUT_SHARE, label="Held-out share",
        widget=forms.NumberInput(attrs={"step": "0.05", "placeholder": "0"}),
        help_text="For a file without held-out problems (HumanEval, MBPP): this share becomes the held-out split, "
                  "chosen by the seed. A file with its own held-out split keeps it.")
    heldout_seed = forms.IntegerField(required=False, min_value=0, initial=0, label="Seed",
                                      help_text="The same file, share and seed choose the same problems.")

    def heldout(self) -> tuple[float, int] | None:
        share = self.cleaned_data.get("heldout_share")
        return (share, self.cleaned_data.get("heldout_seed") or 0) if share else None


class HeldoutForm(forms.Form):
    """The set page's held-out share (``curation.set_heldout_share``)."""

    share = forms.FloatField(min_value=0, max_value=MAX_HELDOUT_SHARE,
                             widget=forms.NumberInput(attrs={"step": "0.05"}),
                             help_text="0 puts every problem back in train.")
    seed = forms.IntegerField(min_value=0, initial=0)


class ProblemFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200)
    split = forms.ChoiceField(required=False, choices=[("", "All splits"), ("train", "train"), ("heldout", "heldout")])
    verdict = forms.ChoiceField(required=False, choices=[("", "All verdicts"), ("failing", "Failing validation"),
                                                         ("passing", "Passing validation")])


class ProbeForm(forms.Form):
    """"Estimate difficulty": a model the user may name (preset/installed models, their own checkpoints)
    and a bounded sample count; `probes.request_probe` checks the model again as the run form does."""

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
