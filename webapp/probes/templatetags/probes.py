"""``{% probe_form as probe_form %}``: the set page's "Estimate difficulty" form, so that the problems
app's page shows it without importing this app (which builds on problems and runs)."""
from django import template

from ..forms import ProbeForm

register = template.Library()


@register.simple_tag(takes_context=True)
def probe_form(context) -> ProbeForm:
    """The form a refused request sent back (``probe_form`` in the context), else a fresh one that starts
    from the latest probe's model and sample count (estimating again keeps them)."""
    if context.get("probe_form") is not None:
        return context["probe_form"]
    latest = context.get("probe")
    initial = {"model": latest.model, "samples": latest.samples} if latest is not None else {}
    return ProbeForm(user=context["request"].user, initial=initial)
