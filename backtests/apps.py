from django.apps import AppConfig


class BacktestsConfig(AppConfig):
    name = "backtests"
