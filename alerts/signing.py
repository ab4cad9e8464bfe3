"""Signing secrets and signatures of alert webhooks.

A secret is `lr_whsec_` + 32 random bytes (URL-safe base64); the HMAC key is the UTF-8 of the whole string. It must
be recoverable to sign, so it is stored Fernet-encrypted with a key derived from SECRET_KEY (HKDF-SHA256); the
database alone reveals nothing, and changing SECRET_KEY makes stored secrets unreadable (rotate them after).
"""

import base64
import hashlib
import hmac
import secrets
from functools import cache

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SECRET_PREFIX = "lr_whsec_"  # noqa: S105 (a public prefix, not a secret)


@cache
def _fernet(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"leroy.alerts.webhook-secret").derive(
        secret_key.encode()
    )
    return Fernet(base64.urlsafe_b64encode(key))


def secret_new() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_encrypt(secret: str) -> str:
    return _fernet(settings.SECRET_KEY).encrypt(secret.encode()).decode()


def secret_decrypt(ciphertext: str) -> str:
    return _fernet(settings.SECRET_KEY).decrypt(ciphertext.encode()).decode()


def secret_display_prefix(secret: str) -> str:
    """Enough of the secret to tell two apart in a list, far too little to sign with."""
    return secret[: len(SECRET_PREFIX) + 6]


def signature(*, secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The X-Leroy-Signature value: `v1=` + hex HMAC-SHA256 over "{delivery}.{timestamp}.{raw body}"."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
