"""Writes for accounts: sign-up, e-mail changes, activation and API keys."""

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.tokens import default_token_generator
from django.core import signing
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.db.models import Max, ProtectedError
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.crypto import salted_hmac
from django.utils.encoding import force_bytes
from django.utils.http import urlencode, urlsafe_base64_encode

from accounts.models import SCOPE_READ, SCOPE_WRITE, ApiKey, User
from leroy import broker
from leroy.clock import now
from leroy.errors import DomainError

logger = logging.getLogger(__name__)

KEY_PREFIX = "lr_live_"
LOOKUP_LENGTH = 8
# last_used_at is advisory; writing it at most once a minute keeps every call from becoming a write.
LAST_USED_GRANULARITY = timedelta(seconds=60)


class AccountError(DomainError):
    """A rule of the accounts domain was broken; `code` is machine-readable."""


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    plaintext: str  # shown once, never stored


def hash_key(plaintext: str) -> str:
    return hmac.new(settings.LEROY_API_KEY_PEPPER, plaintext.encode(), hashlib.sha256).hexdigest()


def user_create(*, email: str, password: str | None) -> User:
    return User.objects.create_user(email=email, password=password)


def suspended(user: User) -> bool:
    """An account an operator deactivated (admin's "active" unticked): it had a password, unlike a sign-up not yet
    confirmed; or one its owner closed. Signing up again must not reopen it, nor bring back its keys and tokens."""
    return not user.is_active and (user.has_usable_password() or user.closed_at is not None)


def closed_address(user: User) -> str:
    """What a closed account's address becomes: no one's mailbox (.invalid never resolves, and sign-up refuses it),
    unique and unguessable (a sign-up squatting on it once made the close fail)."""
    return f"closed-{user.pk}-{secrets.token_hex(8)}@closed.invalid"


@transaction.atomic
def account_close(*, user: User) -> None:
    """Close the account for good: every API key revoked, every OAuth client disconnected, every session ended (the
    password becomes unusable), its address freed for a new sign-up. What it had queued stops as a suspended
    account's does; its rows stay, for the ledger. One conditional update, so a password saved at the same moment
    cannot reopen it (`password_store`) and a second close changes nothing."""
    from accounts import oauth  # it imports this module

    closing = User.objects.filter(pk=user.pk, closed_at__isnull=True)
    if not closing.update(is_active=False, closed_at=now(), email=closed_address(user), password=make_password(None)):
        return  # closed already
    api_keys_revoke_all(user=user)
    oauth.oauth_clients_disconnect_all(user=user)


def password_store(*, user: User) -> None:
    """Write the password `user` holds (set by the form) to its row, only while the account is active and open: a
    form saving the copy it read would undo a close or a suspension committed meanwhile (found from outside: a
    password change sent with a close reopened the account)."""
    if not User.objects.filter(pk=user.pk, is_active=True, closed_at__isnull=True).update(password=user.password):
        raise AccountError("account_inactive", "This account is closed or suspended: its password was not changed.")


def account_mail_send(*, subject: str, body: str, to: str) -> None:
    """Hand an account e-mail, rendered, to a worker once the request's writes commit: the request never waits for
    the mail server, so sign-up and password reset take the same time whether or not the address has an account.
    When the broker does not take it (down, its disk full), it is sent from here rather than lost: only then does
    the request wait for the mail server."""
    from accounts import tasks  # its OAuth housekeeping imports accounts.oauth, which imports this module

    def enqueue() -> None:
        if not broker.sent(lambda: tasks.mail_send_task.delay(subject, body, [to]), "account e-mail"):
            try:
                EmailMessage(subject, body, None, [to]).send()
            except Exception:  # the page says a mail was sent either way: a failure is the operator's to see
                logger.exception("account e-mail not sent")

    transaction.on_commit(enqueue)


def signup_request(*, email: str, next_url: str = "") -> None:
    """Answer a sign-up by e-mail only: a new or unconfirmed address gets a link to choose its password, an
    existing account a reminder with a reset link, a suspended one a note that it stays suspended. The caller shows
    the same page either way."""
    email = email.strip().lower()
    origin = settings.LEROY_PUBLIC_ORIGIN
    with transaction.atomic():
        user, created = User.objects.select_for_update().get_or_create(
            email=email, defaults={"is_active": False, "password": ""}
        )
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
    if user.is_active and user.has_usable_password():
        context = {"origin": origin, "email": email, "reset_url": origin + reverse("accounts:password-reset")}
        template = "accounts/email/signup_existing.txt"
    elif suspended(user):
        context = {"origin": origin, "email": email}
        template = "accounts/email/signup_suspended.txt"
    else:
        path = reverse(
            "accounts:signup-confirm",
            kwargs={
                "uidb64": urlsafe_base64_encode(force_bytes(user.pk)),
                "token": default_token_generator.make_token(user),
            },
        )
        link = origin + path + (("?" + urlencode({"next": next_url})) if next_url else "")
        context = {"origin": origin, "email": email, "link": link}
        template = "accounts/email/signup_confirm.txt"
    account_mail_send(subject="Your Leroy account", body=render_to_string(template, context), to=email)


EMAIL_CHANGE_SALT = "accounts.email-change"
EMAIL_LINK_INVALID = "This link no longer works: it was used already, has expired, or was not copied whole."


@dataclass(frozen=True)
class EmailChange:
    """What an e-mail change link asks: move `user` from the address `old` to `new`."""

    user: User
    old: str
    new: str


def _account_stamp(user: User) -> str:
    """What an e-mail change link must still find: the same password (someone who knew the old one may have asked)
    and no move since it was asked for (a link stays used even once the account is back on its old address)."""
    changed = user.email_changed_at.isoformat() if user.email_changed_at else ""
    return salted_hmac(EMAIL_CHANGE_SALT, f"{user.password}|{changed}", algorithm="sha256").hexdigest()[:32]


def email_change_request(*, user: User, new_email: str) -> None:
    """Mail the new address a link that moves the account to it; nothing changes until it is followed. The link is
    signed, lasts PASSWORD_RESET_TIMEOUT, and names the old address and carries the account's stamp, so it works
    once, not after another move, and not after a new password."""
    payload = {"user": user.pk, "old": user.email, "new": new_email, "stamp": _account_stamp(user)}
    token = signing.dumps(payload, salt=EMAIL_CHANGE_SALT, compress=True)
    origin = settings.LEROY_PUBLIC_ORIGIN
    context = {"old": user.email, "new": new_email, "link": origin + reverse("accounts:email-confirm", args=[token])}
    body = render_to_string("accounts/email/email_change_confirm.txt", context)
    account_mail_send(subject="Confirm your new Leroy e-mail address", body=body, to=new_email)


def email_change_of(token: str) -> EmailChange:
    """The change a link asks for, if it still may be made; else AccountError("link_invalid")."""
    try:
        payload = signing.loads(token, salt=EMAIL_CHANGE_SALT, max_age=settings.PASSWORD_RESET_TIMEOUT)
    except signing.BadSignature:
        raise AccountError("link_invalid", EMAIL_LINK_INVALID) from None
    user = User.objects.filter(pk=payload["user"]).first()
    if user is None or not user.is_active or user.email != payload["old"] or _account_stamp(user) != payload["stamp"]:
        raise AccountError("link_invalid", EMAIL_LINK_INVALID)
    return EmailChange(user, payload["old"], payload["new"])


def email_change_confirm(*, token: str) -> EmailChange:
    """Move the account to the link's new address, and tell the old address. Refused, changing nothing, when the
    link no longer may be used or another account holds the new address. A sign-up not yet confirmed there gives way
    (it holds nothing, and the link's follower reads that mailbox: else a stranger's sign-up would block the move)."""
    with transaction.atomic():
        change = email_change_of(token)
        user = User.objects.select_for_update().get(pk=change.user.pk)
        if user.email != change.old:  # a concurrent confirmation of the same link moved it first
            raise AccountError("link_invalid", EMAIL_LINK_INVALID)
        taken = AccountError("email_taken", f"Another account uses {change.new}; this account keeps {change.old}.")
        holder = User.objects.select_for_update().filter(email=change.new).first()
        if holder is not None:
            if holder.is_active or suspended(holder) or holder.last_login is not None:
                raise taken
            try:
                with transaction.atomic():
                    holder.delete()
            except ProtectedError:  # it holds rows after all: it stays
                raise taken from None
        # One conditional update: a close or suspension committed since the link was read leaves it refused.
        moving = User.objects.filter(pk=user.pk, email=change.old, is_active=True, closed_at__isnull=True)
        try:
            with transaction.atomic():
                moved = moving.update(email=change.new, email_changed_at=now())
        except IntegrityError:  # taken between the check and the write
            raise taken from None
        if not moved:
            raise AccountError("link_invalid", EMAIL_LINK_INVALID)
        user.refresh_from_db()
        context = {
            "old": change.old,
            "new": change.new,
            "reset_url": settings.LEROY_PUBLIC_ORIGIN + reverse("accounts:password-reset"),
        }
        body = render_to_string("accounts/email/email_changed.txt", context)
        account_mail_send(subject="Your Leroy e-mail address changed", body=body, to=change.old)
    return EmailChange(user, change.old, change.new)


@transaction.atomic
def mcp_activate(*, user: User) -> User:
    locked = User.objects.select_for_update().get(pk=user.pk)
    if locked.mcp_activated_at is None:
        locked.mcp_activated_at = now()
        locked.save(update_fields=["mcp_activated_at"])
    user.mcp_activated_at = locked.mcp_activated_at
    return locked


def api_keys_revoke_all(*, user: User) -> int:
    """Revoke every active key of the user (a password reset that ends every credential); returns how many."""
    return ApiKey.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=now())


@transaction.atomic
def api_key_create(*, user: User, name: str, write: bool = False) -> IssuedKey:
    """Issue a key. The user row is locked so that concurrent requests cannot exceed the active-key cap or take one
    number."""
    locked = User.objects.select_for_update().get(pk=user.pk)
    if locked.mcp_activated_at is None:
        raise AccountError("mcp_not_activated", "Activate MCP on the account page before creating API keys.")
    name = name.strip()
    if not name or len(name) > 100:
        raise AccountError("invalid_name", "A key name of 1 to 100 characters is required.")
    active = ApiKey.objects.filter(user=locked, revoked_at__isnull=True).count()
    if active >= settings.LEROY_API_KEYS_MAX_ACTIVE:
        raise AccountError(
            "too_many_keys",
            f"An account may hold at most {settings.LEROY_API_KEYS_MAX_ACTIVE} active API keys; revoke one first.",
        )
    random_part = secrets.token_urlsafe(32)
    plaintext = KEY_PREFIX + random_part
    last = ApiKey.objects.filter(user=locked).aggregate(last=Max("number"))["last"] or 0
    api_key = ApiKey.objects.create(
        user=locked,
        number=last + 1,
        name=name,
        prefix=random_part[:LOOKUP_LENGTH],
        last4=random_part[-4:],
        key_hash=hash_key(plaintext),
        scopes=f"{SCOPE_READ} {SCOPE_WRITE}" if write else SCOPE_READ,
    )
    return IssuedKey(api_key=api_key, plaintext=plaintext)


def api_key_revoke(*, user: User, number: int) -> ApiKey:
    """Revoke the user's key with that number; effective on the very next request. A key revoked already keeps its
    revoked_at and is refused as `already_revoked`, so a second press never reads as a revocation."""
    try:
        api_key = ApiKey.objects.get(user=user, number=number)
    except ApiKey.DoesNotExist:
        raise AccountError("not_found", "No such API key on this account.") from None
    if not ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=now()):
        raise AccountError("already_revoked", f"{api_key.name} was already revoked.")
    api_key.refresh_from_db()
    return api_key


def api_key_authenticate(*, plaintext: str) -> ApiKey | None:
    """The active key matching `plaintext`, or None. Records when it was last used."""
    if not plaintext.startswith(KEY_PREFIX) or len(plaintext) > 200:
        return None
    lookup = plaintext[len(KEY_PREFIX) : len(KEY_PREFIX) + LOOKUP_LENGTH]
    digest = hash_key(plaintext)
    candidates = ApiKey.objects.select_related("user").filter(prefix=lookup, revoked_at__isnull=True)
    for candidate in candidates:
        if hmac.compare_digest(candidate.key_hash, digest) and candidate.user.is_active:
            frozen_now = now()
            if candidate.last_used_at is None or frozen_now - candidate.last_used_at >= LAST_USED_GRANULARITY:
                ApiKey.objects.filter(pk=candidate.pk).update(last_used_at=frozen_now)
                candidate.last_used_at = frozen_now
            return candidate
    return None
