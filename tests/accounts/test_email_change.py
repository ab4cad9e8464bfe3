"""A signed-in account moves to another e-mail address: a link to the new address, a button on its page, the old
address told; nothing changes on a wrong password, a used, stale or tampered link, or an address another account
holds."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.models import User

PASSWORD = "correct horse battery staple"
ORIGIN = "http://127.0.0.1:8000"


@pytest.fixture
def signed_in(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def ask(client: Client, email: str = "alice@new.example", password: str = PASSWORD, capture=None):
    form = {"email": email, "password": password}
    if capture is None:
        return client.post(reverse("accounts:email-change"), form, REMOTE_ADDR="198.51.100.9")
    with capture(execute=True):
        return client.post(reverse("accounts:email-change"), form, REMOTE_ADDR="198.51.100.9")


def link_of(message) -> str:
    [link] = re.findall(r"http://\S+/account/email/confirm/\S+/", message.body)
    return link.removeprefix(ORIGIN)


def test_the_email_page_needs_a_signed_in_browser(client, owner):
    response = client.get(reverse("accounts:email-change"))

    assert response["Location"] == "/account/login/?next=/account/email/"


def test_asking_mails_a_link_to_the_new_address_and_changes_nothing_yet(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    response = ask(signed_in, "Alice@New.example", capture=django_capture_on_commit_callbacks)

    owner.refresh_from_db()
    assert response.status_code == 200
    assert "A link is on its way to alice@new.example." in response.content.decode()
    assert owner.email == "alice@example.com"
    [message] = mailoutbox
    assert (message.to, message.subject) == (["alice@new.example"], "Confirm your new Leroy e-mail address")


def test_opening_the_link_asks_and_changes_nothing(signed_in, owner, mailoutbox, django_capture_on_commit_callbacks):
    ask(signed_in, capture=django_capture_on_commit_callbacks)

    page = Client().get(link_of(mailoutbox[0]))

    owner.refresh_from_db()
    assert page.status_code == 200
    assert "Move the Leroy account of alice@example.com to alice@new.example?" in page.content.decode()
    assert owner.email == "alice@example.com"


def test_the_links_button_moves_the_account_tells_the_old_address_and_the_new_one_signs_in(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    link = link_of(mailoutbox[0])

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(link, follow=True)

    owner.refresh_from_db()
    assert owner.email == "alice@new.example"
    assert response.redirect_chain == [("/account/", 302)]
    assert "This account now uses alice@new.example." in response.content.decode()
    told = mailoutbox[1]
    assert (told.to, told.subject) == (["alice@example.com"], "Your Leroy e-mail address changed")
    assert "now uses alice@new.example" in told.body
    fresh = Client()
    assert fresh.login(username="alice@new.example", password=PASSWORD)
    assert not Client().login(username="alice@example.com", password=PASSWORD)


def test_a_link_works_once(signed_in, owner, mailoutbox, django_capture_on_commit_callbacks):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    link = link_of(mailoutbox[0])
    Client().post(link)

    again = Client().post(link)

    owner.refresh_from_db()
    assert again.status_code == 400
    assert "This link no longer works" in again.content.decode()
    assert owner.email == "alice@new.example"


def test_a_used_link_stays_used_once_the_account_is_back_on_the_address_it_named(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    ask(signed_in, "alice@two.example", capture=django_capture_on_commit_callbacks)
    first = link_of(mailoutbox[-1])
    with django_capture_on_commit_callbacks(execute=True):
        Client().post(first)  # alice@example.com -> alice@two.example
    owner.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        services.email_change_request(user=owner, new_email="alice@example.com")
    Client().post(link_of(mailoutbox[-1]))  # and back

    replayed = Client().post(first)

    owner.refresh_from_db()
    assert replayed.status_code == 400
    assert owner.email == "alice@example.com"


def test_a_link_overtaken_by_another_move_changes_nothing(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    ask(signed_in, "alice@two.example", capture=django_capture_on_commit_callbacks)
    ask(signed_in, "alice@three.example", capture=django_capture_on_commit_callbacks)
    two, three = (link_of(message) for message in mailoutbox)
    Client().post(three)
    owner.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        services.email_change_request(user=owner, new_email="alice@example.com")
    Client().post(link_of(mailoutbox[-1]))  # back to the address `two` names as the old one

    refused = Client().post(two)

    owner.refresh_from_db()
    assert refused.status_code == 400
    assert owner.email == "alice@example.com"


def test_a_new_password_ends_the_links_asked_for_before_it(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    owner.set_password("another long passphrase 7")
    owner.save()

    refused = Client().post(link_of(mailoutbox[0]))

    owner.refresh_from_db()
    assert refused.status_code == 400
    assert owner.email == "alice@example.com"


def test_a_stale_link_changes_nothing(signed_in, owner, mailoutbox, django_capture_on_commit_callbacks, settings):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    settings.PASSWORD_RESET_TIMEOUT = -1  # every signature is older than that

    refused = Client().post(link_of(mailoutbox[0]))

    owner.refresh_from_db()
    assert refused.status_code == 400
    assert owner.email == "alice@example.com"


def test_a_tampered_link_changes_nothing(signed_in, owner, mailoutbox, django_capture_on_commit_callbacks):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    link = link_of(mailoutbox[0])
    token = link.split("/")[-2]
    forged = link.replace(token, token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB"))

    refused = Client().post(forged)

    owner.refresh_from_db()
    assert refused.status_code == 400
    assert owner.email == "alice@example.com"


def test_an_address_another_account_took_meanwhile_is_refused_and_nothing_changes(
    signed_in, owner, outsider, mailoutbox, django_capture_on_commit_callbacks
):
    ask(signed_in, "charlie@example.com", capture=django_capture_on_commit_callbacks)

    refused = Client().post(link_of(mailoutbox[0]))

    owner.refresh_from_db()
    outsider.refresh_from_db()
    assert refused.status_code == 400
    assert "Another account uses charlie@example.com; this account keeps alice@example.com." in refused.content.decode()
    assert (owner.email, outsider.email) == ("alice@example.com", "charlie@example.com")
    assert len(mailoutbox) == 1  # the old address is told of no change


def test_a_strangers_unconfirmed_sign_up_for_the_new_address_gives_way_to_the_move(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        Client().post(reverse("accounts:signup"), {"email": "alice@new.example"})
    move, signup = link_of(mailoutbox[0]), mailoutbox[1]

    moved = Client().post(move)

    owner.refresh_from_db()
    assert moved.status_code == 302
    assert owner.email == "alice@new.example"
    assert list(User.objects.filter(email="alice@new.example").values_list("pk", flat=True)) == [owner.pk]
    [confirm] = re.findall(r"http://\S+/account/signup/confirm/\S+", signup.body)
    page = Client().get(confirm.removeprefix(ORIGIN), follow=True).content.decode()
    assert "This link no longer works" in page


def test_a_wrong_password_mails_nothing(signed_in, owner, mailoutbox, django_capture_on_commit_callbacks):
    response = ask(signed_in, password="not mine", capture=django_capture_on_commit_callbacks)

    assert response.status_code == 200
    assert "Your password was entered incorrectly." in response.content.decode()
    assert mailoutbox == []


def test_the_current_address_is_refused_as_the_new_one(signed_in, mailoutbox):
    response = ask(signed_in, "ALICE@example.com")

    assert "That is already this account&#x27;s address." in response.content.decode()
    assert mailoutbox == []


def test_five_wrong_passwords_lock_the_page_even_for_the_right_one(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks
):
    for _ in range(5):
        ask(signed_in, password="guess")

    locked = ask(signed_in, capture=django_capture_on_commit_callbacks)

    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode()
    assert mailoutbox == []


def test_the_email_form_requires_csrf(owner, mailoutbox):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)

    assert ask(browser).status_code == 403
    assert mailoutbox == []


def test_links_to_one_new_address_stop_at_the_hourly_email_limit(
    signed_in, mailoutbox, settings, django_capture_on_commit_callbacks
):
    settings.LEROY_EMAILS_PER_ADDRESS_PER_HOUR = 2
    for _ in range(2):
        ask(signed_in, capture=django_capture_on_commit_callbacks)

    refused = ask(signed_in, capture=django_capture_on_commit_callbacks)

    assert refused.status_code == 429
    assert len(mailoutbox) == 2


def test_the_service_refuses_a_link_of_a_suspended_account(owner, mailoutbox, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.email_change_request(user=owner, new_email="alice@new.example")
    User.objects.filter(pk=owner.pk).update(is_active=False)

    with pytest.raises(services.AccountError) as refused:
        services.email_change_confirm(token=link_of(mailoutbox[0]).split("/")[-2])

    owner.refresh_from_db()
    assert refused.value.code == "link_invalid"
    assert owner.email == "alice@example.com"


@pytest.mark.parametrize(
    "spelling",
    ["alice@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com", "alice@example.com\u200b", "alice@exam\u00adple.com",
     '"alice"@example.com'],
    ids=["full-width", "zero-width-space", "soft-hyphen", "quoted"],
)  # fmt: skip
def test_an_address_spelled_another_way_to_reach_the_same_mailbox_is_refused(client, outsider, mailoutbox, spelling):
    client.force_login(outsider)

    response = client.post(reverse("accounts:email-change"), {"email": spelling, "password": PASSWORD})
    signup = Client().post(reverse("accounts:signup"), {"email": spelling})

    for page in (response, signup):
        assert "Type the address plainly: no invisible or full-width characters and no quotes." in page.content.decode()
    assert mailoutbox == []
    assert User.objects.count() == 1


def test_a_link_whose_account_was_suspended_while_it_was_followed_moves_nothing(
    signed_in, owner, mailoutbox, django_capture_on_commit_callbacks, monkeypatch
):
    ask(signed_in, capture=django_capture_on_commit_callbacks)
    read = services.email_change_of

    def suspended_meanwhile(token):
        change = read(token)
        User.objects.filter(pk=owner.pk).update(is_active=False)  # an operator, between the read and the write
        return change

    monkeypatch.setattr(services, "email_change_of", suspended_meanwhile)

    refused = Client().post(link_of(mailoutbox[0]))

    owner.refresh_from_db()
    assert refused.status_code == 400
    assert (owner.email, owner.email_changed_at) == ("alice@example.com", None)
