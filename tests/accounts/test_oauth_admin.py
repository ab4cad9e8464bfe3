import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from oauth2_provider.models import AccessToken, RefreshToken

from accounts.models import User

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(owner: User) -> Client:
    owner.is_staff = owner.is_superuser = True
    owner.save()
    session = Client()
    session.force_login(owner)
    return session


def test_token_admin_is_read_only_and_never_shows_a_token(staff: Client, connect):
    tokens = connect()
    access = AccessToken.objects.get()

    listing = staff.get("/admin/oauth2_provider/accesstoken/")
    change = staff.get(f"/admin/oauth2_provider/accesstoken/{access.pk}/change/")
    edit = staff.post(f"/admin/oauth2_provider/accesstoken/{access.pk}/change/", {"scope": "mcp:read mcp:write"})

    assert listing.status_code == 200
    assert 'value="revoke_tokens"' in listing.content.decode()
    assert change.status_code == 200
    assert 'name="scope"' not in change.content.decode()
    assert edit.status_code == 403
    assert AccessToken.objects.get().scope == "mcp:read"
    for page in (listing, change):
        assert tokens["access_token"] not in page.content.decode()


def test_refresh_token_revoke_action_revokes_the_pair(staff: Client, connect):
    connect()
    refresh = RefreshToken.objects.get()

    response = staff.post(
        "/admin/oauth2_provider/refreshtoken/",
        {"action": "revoke_tokens", "_selected_action": [refresh.pk]},
    )

    assert response.status_code == 302
    assert RefreshToken.objects.get().revoked is not None
    assert AccessToken.objects.count() == 0


def test_staff_with_view_permission_only_cannot_revoke(owner: User, connect):
    connect()
    owner.is_staff = True
    owner.save()
    owner.user_permissions.add(Permission.objects.get(codename="view_refreshtoken"))
    session = Client()
    session.force_login(owner)

    listing = session.get("/admin/oauth2_provider/refreshtoken/")
    session.post(
        "/admin/oauth2_provider/refreshtoken/",
        {"action": "revoke_tokens", "_selected_action": [RefreshToken.objects.get().pk]},
    )

    assert listing.status_code == 200
    assert "revoke_tokens" not in listing.content.decode()
    assert RefreshToken.objects.get().revoked is None
