"""The log's static endpoints: fixed formats, no auth, cacheable, structured 400s that change nothing."""

import base64
import hashlib
import json

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import override_settings
from django.utils.html import escape

from evidence.models import LogCheckpoint, LogEntry
from evidence.publication import services
from evidence.publication.signing import format_private_key
from leroy_verify.merkle import Tree, leaf_hash, verify_consistency, verify_inclusion
from leroy_verify.note import open_note, parse_checkpoint, parse_verifier_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def log():
    for n in range(3):
        services.entries_append(
            [{"kind": "eod_snapshot", "session": f"2026-07-0{n + 1}", "snapshot_sha256": "cd" * 32, "row_count": n}]
            * (n + 1)
        )
    return LogEntry.objects.count()


def test_checkpoint_and_key_are_plain_text_and_verify_together(client, log):
    note = client.get("/log/checkpoint")
    key = client.get("/.well-known/leroy-log-key")

    assert note["Content-Type"] == key["Content-Type"] == "text/plain; charset=utf-8"
    assert note["Cache-Control"] == "public, max-age=5" and note["Access-Control-Allow-Origin"] == "*"
    verifier = parse_verifier_key(key.content.decode())
    assert key.content.decode() == f"{verifier}\n"
    checkpoint = parse_checkpoint(open_note(note.content.decode(), verifier))
    assert (checkpoint.origin, checkpoint.size) == ("test.leroy.invalid/log", log)


def test_entries_are_the_objects_whose_canonical_bytes_are_the_leaves(client, log):
    response = client.get("/log/entries", {"start": 1, "end": 4})

    assert response["Cache-Control"] == "public, max-age=31536000, immutable"
    items = response.json()["entries"]
    assert [item["index"] for item in items] == [1, 2, 3]
    for item in items:
        assert set(item) == {"index", "entry", "leaf_hash"}
        assert item["leaf_hash"] == hashlib.sha256(b"\x00" + rfc8785.dumps(item["entry"])).hexdigest()


def test_proofs_verify_against_the_signed_checkpoint(client, log):
    checkpoint = parse_checkpoint(
        open_note(client.get("/log/checkpoint").content.decode(), parse_verifier_key(str(services.signer().verifier)))
    )
    item = client.get("/log/entries", {"start": 4, "end": 5}).json()["entries"][0]

    inclusion = client.get("/log/proof/inclusion", {"index": 4, "tree_size": log}).json()
    consistency = client.get("/log/proof/consistency", {"first": 3, "second": log}).json()

    assert set(inclusion) == {"index", "tree_size", "root_hash", "hashes"}
    assert base64.b64decode(inclusion["root_hash"]) == checkpoint.root
    verify_inclusion(4, log, bytes.fromhex(item["leaf_hash"]), [base64.b64decode(h) for h in inclusion["hashes"]],
                     checkpoint.root)  # fmt: skip
    assert (consistency["first"], consistency["second"]) == (3, log)
    first_root = base64.b64decode(client.get("/log/proof/inclusion", {"index": 0, "tree_size": 3}).json()["root_hash"])
    verify_consistency(3, log, first_root, checkpoint.root, [base64.b64decode(h) for h in consistency["hashes"]])


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/log/entries", {"start": 2, "end": 2}),
        ("/log/entries", {"start": 0, "end": 7}),
        ("/log/entries", {"start": -1, "end": 2}),
        ("/log/entries", {"start": "a", "end": 2}),
        ("/log/entries", {"end": 2}),
        ("/log/entries", {"start": "\u0661", "end": 2}),  # a non-ASCII digit
        ("/log/proof/inclusion", {"index": 6, "tree_size": 6}),
        ("/log/proof/inclusion", {"index": 0, "tree_size": 7}),
        ("/log/proof/inclusion", {"index": 0, "tree_size": "9" * 40}),
        ("/log/proof/consistency", {"first": 4, "second": 3}),
        ("/log/proof/consistency", {"first": 1}),
    ],
)
def test_bad_parameters_get_a_structured_400(client, log, path, params):
    response = client.get(path, params)

    assert response.status_code == 400
    assert response["Cache-Control"] == "no-store"
    assert set(response.json()["error"]) == {"code", "message"}
    assert LogEntry.objects.count() == log


def test_more_than_a_thousand_entries_at_once_are_refused(client, log):
    response = client.get("/log/entries", {"start": 0, "end": 1001})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_range"


def test_the_endpoints_are_read_only(client, log):
    for path in ("/log/checkpoint", "/.well-known/leroy-log-key", "/log/entries"):
        assert client.post(path).status_code == 405


def test_tlog_tiles_rebuild_the_signed_root_from_hash_tiles_and_entry_bundles(client):
    services.entries_append(
        [{"kind": "eod_snapshot", "session": "2026-07-01", "snapshot_sha256": f"{n:064x}", "row_count": n}
         for n in range(300)]
    )  # fmt: skip
    verifier = parse_verifier_key(client.get("/.well-known/leroy-log-key").content.decode())
    checkpoint = parse_checkpoint(open_note(client.get("/log/checkpoint").content.decode(), verifier))

    full, partial = client.get("/log/tile/0/000"), client.get("/log/tile/0/001.p/44")
    assert full["Content-Type"] == "application/octet-stream"
    assert full["Cache-Control"] == "public, max-age=31536000, immutable"
    leaves = [full.content[i : i + 32] for i in range(0, 256 * 32, 32)] + [
        partial.content[i : i + 32] for i in range(0, 44 * 32, 32)
    ]
    assert len(full.content) == 256 * 32 and len(partial.content) == 44 * 32
    assert Tree(leaves).root(300) == checkpoint.root
    assert client.get("/log/tile/1/000.p/1").content == Tree(leaves).hash(0, 256)  # level 1: 256-leaf subtrees
    bundle = client.get("/log/tile/entries/000").content + client.get("/log/tile/entries/001.p/44").content
    entries, at = [], 0
    while at < len(bundle):
        length = int.from_bytes(bundle[at : at + 2], "big")
        entries.append(bundle[at + 2 : at + 2 + length])
        at += 2 + length
    assert [leaf_hash(entry) for entry in entries] == leaves
    assert json.loads(entries[299])["row_count"] == 299
    missing = ["/log/tile/0/001", "/log/tile/0/001.p/45", "/log/tile/1/000", "/log/tile/0/1", "/log/tile/0/x000",
               "/log/tile/64/000.p/1", "/log/tile/entries/002.p/1", "/log/tile/0/000.p/0"]  # fmt: skip
    assert [client.get(path).status_code for path in missing] == [404] * len(missing)


def test_the_log_page_says_exactly_what_is_committed_and_that_no_witness_cosigns(client, log):
    page = " ".join(client.get("/log/").content.decode().split())

    assert "every day's commitment to the answers it gave" not in page
    assert (
        "every end-of-day snapshot with the hashes of its replay, held-out and walk-forward evidence, and each day's "
        "Merkle root of the hashes of the metered answers that carried a receipt (other answers are not committed)"
    ) in page
    assert (
        "No outside witness cosigns the checkpoints: a split view (different logs shown to different clients)" in page
    )
    assert "<td>end-of-day snapshot of 2026-07-03</td>" in page
    assert "leroy-verify --log http://127.0.0.1:8000 --key KEY --eod heldout.json" in page


MOVED = "127.0.0.1:8766/log"  # a var dir first served under the tests' origin, now served on another port
KEY_ELSEWHERE = (
    "publication log: the signing key is named test.leroy.invalid/log, not for this server's log origin "
    "127.0.0.1:8766/log (LEROY_LOG_ORIGIN, by default the host of LEROY_PUBLIC_ORIGIN + /log); nothing is signed. "
    "A log keeps its origin: set LEROY_LOG_ORIGIN=test.leroy.invalid/log to go on with the log of that key, or "
    "start a new log under 127.0.0.1:8766/log with a fresh LEROY_VAR_DIR (its database and generated key)."
)
NOT_THE_LOGS_KEY = (
    "publication log: this server's signing key (named 127.0.0.1:8766/log) does not verify the log's latest "
    "checkpoint, of test.leroy.invalid/log, so no key is served. Set LEROY_LOG_SIGNING_KEY to the key that signed "
    "the log (named test.leroy.invalid/log) and LEROY_LOG_ORIGIN=test.leroy.invalid/log to go on with this log."
)


def unavailable(message: str) -> dict[str, object]:
    return {"error": {"code": "log_unavailable", "message": message}}


def test_a_key_named_for_another_origin_still_serves_the_log_it_signed(client, log):
    with override_settings(LEROY_LOG_ORIGIN=MOVED):
        page = client.get("/log/")
        note = client.get("/log/checkpoint")
        key = client.get("/.well-known/leroy-log-key")

    assert (page.status_code, note.status_code, key.status_code) == (200, 200, 200)
    checkpoint = parse_checkpoint(open_note(note.content.decode(), parse_verifier_key(key.content.decode())))
    assert (checkpoint.origin, checkpoint.size) == ("test.leroy.invalid/log", log)
    assert f'<code id="verifier-key">{key.content.decode().strip()}</code>' in page.content.decode()
    assert LogEntry.objects.count() == log and LogCheckpoint.objects.count() == 3


def test_the_empty_log_answers_503_naming_the_origin_to_set_while_its_key_is_named_for_another(client):
    with override_settings(LEROY_LOG_ORIGIN=MOVED):
        note = client.get("/log/checkpoint")
        key = client.get("/.well-known/leroy-log-key")
        page = client.get("/log/")

    assert (note.status_code, key.status_code, page.status_code) == (503, 503, 503)
    assert note.json() == key.json() == unavailable(KEY_ELSEWHERE)
    assert note["Cache-Control"] == key["Cache-Control"] == "no-store"
    assert page["Content-Type"] == "text/html; charset=utf-8"
    assert f'<p id="log-unavailable"><code>{escape(KEY_ELSEWHERE)}</code></p>' in page.content.decode()
    assert LogCheckpoint.objects.exists() is False


def test_a_key_that_did_not_sign_the_log_serves_the_stored_checkpoint_and_a_503_for_the_key(client, log):
    moved = format_private_key(MOVED, Ed25519PrivateKey.generate())
    stored = client.get("/log/checkpoint").content

    with override_settings(LEROY_LOG_ORIGIN=MOVED, LEROY_LOG_SIGNING_KEY=moved):
        note = client.get("/log/checkpoint")
        entries = client.get("/log/entries", {"start": 0, "end": log})
        key = client.get("/.well-known/leroy-log-key")
        page = client.get("/log/")

    assert (note.status_code, note.content) == (200, stored)
    assert [item["index"] for item in entries.json()["entries"]] == list(range(log))
    assert (key.status_code, key.json()) == (503, unavailable(NOT_THE_LOGS_KEY))
    assert page.status_code == 503 and escape(NOT_THE_LOGS_KEY) in page.content.decode()
    secret = moved.split("+", 4)[4]  # PRIVATE+KEY+<origin>+<hash>+<base64>: the base64 may hold, or end with, "+"
    assert secret and secret not in key.content.decode() + page.content.decode()
    assert LogCheckpoint.objects.count() == 3


def test_an_unreadable_key_file_answers_503_without_naming_its_path(client, log, tmp_path):
    missing = tmp_path / "log_signing_key"

    with override_settings(LEROY_LOG_SIGNING_KEY=str(missing)):
        note = client.get("/log/checkpoint")
        key = client.get("/.well-known/leroy-log-key")
        page = client.get("/log/")

    message = "LEROY_LOG_SIGNING_KEY names a key file this server cannot read (No such file or directory)"
    assert note.status_code == 200
    assert (key.status_code, key.json()) == (503, unavailable(message))
    assert page.status_code == 503 and escape(message) in page.content.decode()
    assert str(tmp_path) not in key.content.decode() + page.content.decode()
    assert missing.exists() is False


def test_the_rest_checkpoint_answers_503_while_the_empty_logs_key_is_named_for_another_origin(client):
    with override_settings(LEROY_LOG_ORIGIN=MOVED):
        response = client.get("/api/v1/evidence/get_log_checkpoint")

    assert (response.status_code, response.json()) == (503, unavailable(KEY_ELSEWHERE))
    assert LogCheckpoint.objects.exists() is False
