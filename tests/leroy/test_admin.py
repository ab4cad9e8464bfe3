import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from accounts.models import User

PROJECT_APPS = ("accounts", "billing", "evidence", "backtests", "alerts")


def project_models() -> list:
    return [model for model in apps.get_models() if model._meta.app_label in PROJECT_APPS]


def test_every_project_model_has_an_admin():
    assert [m._meta.label for m in project_models() if m not in admin.site._registry] == []


@pytest.mark.parametrize("model", project_models(), ids=lambda m: m._meta.label)
def test_every_admin_changelist_opens_for_staff(client, db, model):
    client.force_login(User.objects.create_superuser(email="admin@example.com", password="x-long-password"))

    response = client.get(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))

    assert response.status_code == 200
