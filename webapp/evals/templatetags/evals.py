"""``{% load evals %}``: how the evaluation pages show a rate."""
from django import template

register = template.Library()


@register.filter
def pct(value) -> str:
    """0.123 -> "12.3%"; None -> "–"."""
    return "–" if value is None else f"{100 * float(value):.1f}%"


@register.filter
def index(values, i: int):
    try:
        return values[i]
    except (IndexError, TypeError, KeyError):
        return None
