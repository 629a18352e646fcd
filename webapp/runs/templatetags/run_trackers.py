"""``{% tracker_rows run as trackers %}``: the run page's experiment-tracker rows (webapp/runs/trackers.py)."""
from django import template

from ..trackers import tracker_rows as rows_of

register = template.Library()


@register.simple_tag
def tracker_rows(run) -> list:
    return rows_of(run)
