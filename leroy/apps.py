from django.apps import AppConfig


class LeroyConfig(AppConfig):
    name = "leroy"
