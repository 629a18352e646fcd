from django import forms

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


class ProblemFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200)
    split = forms.ChoiceField(required=False, choices=[("", "All splits"), ("train", "train"), ("heldout", "heldout")])
    verdict = forms.ChoiceField(required=False, choices=[("", "All verdicts"), ("failing", "Failing validation"),
                                                         ("passing", "Passing validation")])
