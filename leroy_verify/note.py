"""C2SP signed notes with Ed25519 keys, and C2SP tlog-checkpoint bodies (https://c2sp.org/signed-note,
https://c2sp.org/tlog-checkpoint).

A note is text, a blank line, then signature lines `— <key name> <base64(4-byte key hash ‖ signature)>`; the
signature covers the text including its final newline. Key hash = SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4].
"""

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ALG_ED25519 = b"\x01"
SIGNATURE_PREFIX = "— "  # U+2014 EM DASH, then a space


class NoteError(ValueError):
    """A note, key or checkpoint is malformed, or no trusted signature verifies."""


def key_hash(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ALG_ED25519 + public_key).digest()[:4]


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise NoteError(f"not standard base64: {text[:40]!r}") from None


@dataclass(frozen=True)
class Verifier:
    name: str
    key_hash: bytes
    public_key: bytes

    def __str__(self) -> str:
        """The verifier key form `<name>+<8 hex key hash>+<base64(0x01 ‖ public key)>`."""
        encoded = base64.b64encode(ALG_ED25519 + self.public_key).decode()
        return f"{self.name}+{self.key_hash.hex()}+{encoded}"


def verifier_of(name: str, public_key: bytes) -> Verifier:
    if not _valid_name(name) or len(public_key) != 32:
        raise NoteError("a key name is non-empty without spaces or '+', and an Ed25519 key is 32 bytes")
    return Verifier(name=name, key_hash=key_hash(name, public_key), public_key=public_key)


def parse_verifier_key(text: str) -> Verifier:
    name, _, rest = text.strip().partition("+")
    hash_hex, _, encoded = rest.partition("+")  # the base64 itself may contain '+'
    if len(hash_hex) != 8 or hash_hex != hash_hex.lower():
        raise NoteError("verifier key: the key hash is not 8 lowercase hex digits")
    raw = _b64(encoded)
    if len(raw) != 33 or raw[:1] != ALG_ED25519:
        raise NoteError("verifier key: not an Ed25519 key (0x01 followed by 32 bytes)")
    verifier = verifier_of(name, raw[1:])
    if verifier.key_hash.hex() != hash_hex:
        raise NoteError("verifier key: the key hash does not match the name and key")
    return verifier


def open_note(note: str, verifier: Verifier) -> str:
    """The note's text, once a signature by `verifier` verifies over it (signatures by other keys are ignored)."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("note: no blank line before the signatures, or no final newline")
    text, lines = note[: split + 1], note[split + 2 : -1].split("\n")
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(f"note: malformed signature line {line[:60]!r}")
        name, _, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        blob = _b64(encoded)
        if len(blob) < 5:
            raise NoteError("note: signature too short")
        if name != verifier.name or blob[:4] != verifier.key_hash:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(verifier.public_key).verify(blob[4:], text.encode())
        except InvalidSignature:
            raise NoteError(f"note: the signature by {verifier.name} does not verify") from None
        return text
    raise NoteError(f"note: no signature by {verifier.name}+{verifier.key_hash.hex()}")


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


def parse_checkpoint(text: str) -> Checkpoint:
    """A verified note's text as a checkpoint: origin, decimal tree size, base64 root hash, optional extensions."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or not lines[0]:
        raise NoteError("checkpoint: needs an origin, a tree size and a root hash line")
    size = lines[1]
    if not size.isdigit() or (size.startswith("0") and size != "0"):
        raise NoteError(f"checkpoint: tree size {size!r} is not a decimal number")
    root = _b64(lines[2])
    if len(root) != 32:
        raise NoteError("checkpoint: the root hash is not 32 bytes")
    return Checkpoint(origin=lines[0], size=int(size), root=root)
