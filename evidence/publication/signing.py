"""The log's Ed25519 signing key: read from LEROY_LOG_SIGNING_KEY (inline or a file path) or generated, 0600, into
the var dir. Keys use the signed-note private form `PRIVATE+KEY+<name>+<8 hex key hash>+<base64(0x01 ‖ seed)>`,
and the log signs only with a key named for its origin (LEROY_LOG_ORIGIN)."""

import base64
import logging
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from leroy_verify.note import ALG_ED25519, SIGNATURE_PREFIX, NoteError, Verifier, verifier_of

logger = logging.getLogger(__name__)

PREFIX = "PRIVATE+KEY+"


@dataclass(frozen=True)
class Signer:
    verifier: Verifier
    private_key: Ed25519PrivateKey

    def sign(self, text: str) -> str:
        """`text` as a signed note (text, blank line, one signature line)."""
        if not text.endswith("\n") or "\n\n" in text:
            raise ValueError("a note's text ends with one newline and has no blank line")
        blob = self.verifier.key_hash + self.private_key.sign(text.encode())
        return f"{text}\n{SIGNATURE_PREFIX}{self.verifier.name} {base64.b64encode(blob).decode()}\n"


def parse_private_key(text: str) -> Signer:
    name, _, rest = text.strip().removeprefix(PREFIX).partition("+")
    hash_hex, _, encoded = rest.partition("+")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError:
        raw = b""
    if not text.strip().startswith(PREFIX) or len(raw) != 33 or raw[:1] != ALG_ED25519:
        raise ImproperlyConfigured("LEROY_LOG_SIGNING_KEY is not a PRIVATE+KEY+<name>+<hash>+<base64> Ed25519 key")
    private = Ed25519PrivateKey.from_private_bytes(raw[1:])
    try:
        verifier = verifier_of(name, private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    except NoteError as error:
        raise ImproperlyConfigured(f"LEROY_LOG_SIGNING_KEY: {error}") from None
    if verifier.key_hash.hex() != hash_hex:
        raise ImproperlyConfigured("LEROY_LOG_SIGNING_KEY: the key hash does not match its name and key")
    return Signer(verifier=verifier, private_key=private)


def format_private_key(name: str, private: Ed25519PrivateKey) -> str:
    seed = private.private_bytes_raw()
    verifier = verifier_of(name, private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    return f"{PREFIX}{name}+{verifier.key_hash.hex()}+{base64.b64encode(ALG_ED25519 + seed).decode()}"


def _generated(path: Path) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(format_private_key(settings.LEROY_LOG_ORIGIN, Ed25519PrivateKey.generate()) + "\n")
    return path.read_text()


def _key_text() -> str | None:
    """The configured key (inline or a file), or the one generated earlier into the var dir; None before that."""
    configured = settings.LEROY_LOG_SIGNING_KEY
    if configured.startswith(PREFIX):
        return configured
    if configured:
        try:
            return Path(configured).read_text()
        except OSError as error:  # the path stays in the log: an answer that repeats this message never shows it
            logger.error("publication log: LEROY_LOG_SIGNING_KEY file %s: %s", configured, error)
            raise ImproperlyConfigured(
                f"LEROY_LOG_SIGNING_KEY names a key file this server cannot read ({error.strerror})"
            ) from None
    path = settings.LEROY_LOG_KEY_FILE
    return path.read_text() if path.exists() else None


@cache
def _parsed(text: str) -> Signer:
    return parse_private_key(text)


def key_name() -> str | None:
    """The name of the log's key, without generating one: None before the first checkpoint is signed."""
    text = _key_text()
    return _parsed(text).verifier.name if text is not None else None


def local_key() -> Signer:
    """The log's key whatever its name (generated on first use): what verifies the checkpoints it signed. Only
    signing needs its name to be LEROY_LOG_ORIGIN (`signer`)."""
    return _parsed(_key_text() or _generated(settings.LEROY_LOG_KEY_FILE))


def signer() -> Signer:
    """The log's key, refused unless it is named for LEROY_LOG_ORIGIN: the name is the origin a verifier expects on
    every checkpoint's first line, and a key kept from another origin (a var dir first served on another port) would
    sign a log that `leroy-verify` fails as two logs."""
    key = local_key()
    origin = settings.LEROY_LOG_ORIGIN
    if key.verifier.name != origin:
        message = (
            f"publication log: the signing key is named {key.verifier.name}, not for this server's log origin "
            f"{origin} (LEROY_LOG_ORIGIN, by default the host of LEROY_PUBLIC_ORIGIN + /log); nothing is signed. "
            f"A log keeps its origin: set LEROY_LOG_ORIGIN={key.verifier.name} to go on with the log of that key, "
            f"or start a new log under {origin} with a fresh LEROY_VAR_DIR (its database and generated key)."
        )
        logger.error(message)
        raise ImproperlyConfigured(message)
    return key
