from django.urls import path

from evidence import pages
from evidence.publication import views

app_name = "publication"
urlpatterns = [
    path("log/", pages.publication_log, name="page"),
    path("log/checkpoint", views.checkpoint, name="checkpoint"),
    path("log/checkpoint/timestamp", views.checkpoint_timestamp, name="timestamp"),
    path(".well-known/leroy-log-key", views.log_key, name="key"),
    path("log/entries", views.entries, name="entries"),
    path("log/tile/<path:rest>", views.tile, name="tile"),
    path("log/proof/inclusion", views.inclusion, name="inclusion"),
    path("log/proof/consistency", views.consistency, name="consistency"),
]
