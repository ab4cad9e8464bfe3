from django.urls import path

from evidence import pages

app_name = "evidence"
urlpatterns = [path("journal/", pages.journal, name="journal")]
