from datetime import timedelta

from oauth2_provider.models import Application

from accounts.tasks import oauth_housekeeping_task
from leroy.clock import now


def test_housekeeping_deletes_registrations_that_never_obtained_a_token(db):
    stale = Application.objects.create(
        name="stale",
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1/cb",
        registration_source=Application.RegistrationSource.DCR,
    )
    Application.objects.filter(pk=stale.pk).update(created=now() - timedelta(days=2))
    fresh = Application.objects.create(
        name="fresh",
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1/cb",
        registration_source=Application.RegistrationSource.DCR,
    )

    oauth_housekeeping_task()

    assert list(Application.objects.values_list("pk", flat=True)) == [fresh.pk]
