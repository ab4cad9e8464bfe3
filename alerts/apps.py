"""The alerts app (rules, deliveries): installed but empty until the alerts issue builds it."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
