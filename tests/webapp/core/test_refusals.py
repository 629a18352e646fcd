"""A service's refusal on a page's form (webapp.core.refusals.add_refusal)."""
from django import forms

from training.config import ConfigError
from webapp.core.refusals import Conflict, add_refusal


class ModelForm(forms.Form):
    model = forms.CharField()


def test_a_bad_value_of_a_field_the_form_has_shows_under_that_field():
    form = ModelForm({"model": "nope"})
    assert form.is_valid()
    add_refusal(form, ConfigError("model", "no such model"))
    assert form.errors == {"model": ["no such model"]}


def test_a_bad_value_of_a_field_the_form_lacks_shows_above_the_form_naming_the_field():
    form = ModelForm({"model": "m"})
    assert form.is_valid()
    add_refusal(form, ConfigError("sampling.top_p", "must be <= 1"))
    assert form.non_field_errors() == ["sampling.top_p: must be <= 1"]
    assert "model" not in form.errors


def test_a_conflict_shows_above_the_form():
    form = ModelForm({"model": "m"})
    assert form.is_valid()
    add_refusal(form, Conflict("problem set 3 has no problems to probe yet"))
    assert form.non_field_errors() == ["problem set 3 has no problems to probe yet"]
