"""Leroy's own pages for a missing page and a refused one."""

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db]


def test_a_missing_page_is_leroys_own_404_page():
    response = Client().get("/nowhere/at-all/")

    assert response.status_code == 404
    page = response.content.decode()
    assert "<title>Not found · Leroy</title>" in page
    assert "There is nothing at <code>/nowhere/at-all/</code>." in page
    assert 'href="/account/login/"' in page


def test_a_refused_page_is_leroys_own_403_page(client, django_user_model):
    user = django_user_model.objects.create_user(email="plain@example.com", password="correct horse battery staple")
    client.force_login(user)

    response = client.get("/admin/login/")

    assert response.status_code == 403
    assert "This page is not open to this account." in response.content.decode()
