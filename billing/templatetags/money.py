"""`{{ dollars|usd }}`: an amount the selectors give as float dollars, shown exactly (never rounded to the cent)."""

from django import template

from billing import selectors

register = template.Library()


@register.filter
def usd(dollars: float) -> str:
    return selectors.usd(round(dollars * 1_000_000))
