from django import forms

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
