"""The optional RFC 3161 time-stamp authority, against a real local TSA (`openssl ts -reply`): each checkpoint
gets a checked token over its note, served and verifiable by leroy-verify in a clean process; a TSA that fails in
any way leaves the append and the checkpoint intact, stores no token and says so; unset, nothing claims a time."""

import base64
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction

from evidence.eod import selectors as eod
from evidence.eod.services import eod_run
from evidence.models import AppendOnly, LogCheckpoint, LogTimestamp
from evidence.publication import selectors, services
from evidence.publication.tasks import log_timestamp_task
from leroy.ops import CHECKS
from tests.evidence.eod_world import LAST, eod_world, universe_settings
from tests.evidence.test_publication_verify import VERIFY
from tests.evidence.tsa import OPENSSL, make_ca

pytestmark = pytest.mark.django_db
POSTGRES = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the trigger exists on PostgreSQL only")


def snapshot(n: int) -> dict[str, object]:
    return {"kind": "eod_snapshot", "session": f"2026-07-{n + 1:02d}", "snapshot_sha256": f"{n:064x}", "row_count": n}


@pytest.fixture
def append(django_capture_on_commit_callbacks):
    """Append a batch and run what its commit triggers (the time-stamp request), as a committed append would."""

    def run(*entries: dict[str, object]) -> int:
        with django_capture_on_commit_callbacks(execute=True):
            services.entries_append(list(entries))
        return LogCheckpoint.objects.order_by("-tree_size").values_list("tree_size", flat=True)[0]

    return run


def log_timestamp_check() -> dict[str, object]:
    return CHECKS["log_timestamp"][0]()


def test_each_checkpoint_gets_a_checked_token_over_its_note_that_openssl_verifies(tsa, append, client, tmp_path):
    size = append(snapshot(0), snapshot(1))
    append(snapshot(2))

    rows = list(LogTimestamp.objects.order_by("tree_size").values_list("tree_size", "status", "chain_verified"))
    assert rows == [(2, "granted", True), (3, "granted", True)]
    stamp = LogTimestamp.objects.get(tree_size=size)
    assert stamp.tsa_subject == "CN=Leroy Test TSA" and stamp.tsa_url == tsa.url and stamp.detail == ""
    served = client.get("/log/checkpoint/timestamp", {"tree_size": size})
    assert served["Content-Type"] == "application/timestamp-reply"
    assert served["Cache-Control"] == "public, max-age=31536000, immutable"
    assert served.content == bytes(stamp.response)
    (tmp_path / "note").write_bytes(LogCheckpoint.objects.get(tree_size=size).note.encode())
    (tmp_path / "reply.tsr").write_bytes(served.content)
    done = subprocess.run([OPENSSL, "ts", "-verify", "-data", "note", "-in", "reply.tsr", "-CAfile", str(tsa.root),
                           "-untrusted", str(tsa.cert)], cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "Verification: OK" in done.stdout
    latest = client.get("/log/checkpoint/timestamp")
    assert latest.content == bytes(LogTimestamp.objects.get(tree_size=3).response)
    assert latest["Cache-Control"] == "public, max-age=5"


def test_get_log_checkpoint_carries_the_token_and_states_the_authority_in_force(tsa, append):
    size = append(snapshot(0))

    out = selectors.checkpoint()
    stamp = LogTimestamp.objects.get(tree_size=size)
    assert base64.b64decode(out.timestamp_token) == bytes(stamp.response)
    assert out.guarantees.timestamp_authority == "rfc3161"
    timestamp = out.guarantees.timestamp.model_dump(mode="json")
    gen_time = stamp.gen_time.isoformat().replace("+00:00", "Z")
    stamped = {"tree_size": 1, "status": "granted", "gen_time": gen_time, "detail": "",
               "token_url": "/log/checkpoint/timestamp?tree_size=1"}  # fmt: skip
    assert timestamp == {
        "kind": "rfc3161",
        "url": tsa.url,
        "tsa_subject": "CN=Leroy Test TSA",
        "chain_verified_by_leroy": True,
        "latest_checkpoint": stamped,
        "latest_stamped_checkpoint": stamped,
    }
    assert any(line.startswith(f"Time: each checkpoint note is time-stamped by the RFC 3161 TSA at {tsa.url} "
                               "(CN=Leroy Test TSA)") for line in out.guarantees.verifiable)  # fmt: skip
    assert not any("No independent timestamp" in line for line in out.guarantees.not_guaranteed)
    assert log_timestamp_check() == {"tree_size": 1, "gen_time": stamp.gen_time.isoformat()}


def test_the_token_verifies_with_leroy_verify_in_a_clean_process_and_a_foreign_one_does_not(
    tsa, append, client, tmp_path
):
    append(snapshot(0), snapshot(1))
    (tmp_path / "early.txt").write_text(client.get("/log/checkpoint").content.decode())
    (tmp_path / "early.tsr").write_bytes(client.get("/log/checkpoint/timestamp").content)
    append(snapshot(2))
    (tmp_path / "checkpoint.txt").write_text(client.get("/log/checkpoint").content.decode())
    (tmp_path / "checkpoint.tsr").write_bytes(client.get("/log/checkpoint/timestamp").content)
    (tmp_path / "key.txt").write_text(client.get("/.well-known/leroy-log-key").content.decode())
    make_ca(tmp_path, "Other Root")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # no DJANGO_SETTINGS_MODULE, no LEROY_*, no database

    def verify(checkpoint: str, token: str, roots: Path) -> tuple[int, list[str]]:
        args = ["--key", "key.txt", "--checkpoint", checkpoint, "--timestamp", token, "--tsa-roots", str(roots)]
        done = subprocess.run([VERIFY, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert done.stderr == ""
        return done.returncode, done.stdout.splitlines()

    code, lines = verify("checkpoint.txt", "checkpoint.tsr", tsa.root)
    gen_time = LogTimestamp.objects.get(tree_size=3).gen_time.isoformat().replace("+00:00", "Z")
    assert code == 0
    assert lines[1] == f"ok    timestamp: size 3 existed no later than {gen_time} (RFC 3161, CN=Leroy Test TSA)"
    code, lines = verify("checkpoint.txt", "early.tsr", tsa.root)  # a real token, but over another checkpoint
    assert (code, lines[-1]) == (1, "FAIL  timestamp: the token's message imprint is not the SHA-256 of this "
                                    "checkpoint note")  # fmt: skip
    code, lines = verify("early.txt", "early.tsr", tmp_path / "Other Root.crt")
    assert code == 1 and lines[-1].startswith("FAIL  timestamp: the token does not verify against the given roots")


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        ("garbage", "TimestampError: not a DER TimeStampResp: ASN.1 parse error"),
        ("reject", "TimestampError: the TSA did not grant it (PKIStatus 2: Message digest algorithm is not supported."),
        ("wrong_imprint", "TimestampError: the token's message imprint is not the SHA-256 of this checkpoint note"),
        ("http_error", "TimestampError: the TSA answered HTTP 503"),
        ("slow", "ReadTimeoutError: HTTPConnectionPool(host='127.0.0.1'"),
        ("down", "NewConnectionError: HTTPConnection(host='127.0.0.1'"),
    ],
)
def test_a_failing_tsa_never_blocks_the_append_stores_no_token_and_says_so(tsa, append, client, settings, mode,
                                                                           detail):  # fmt: skip
    if mode == "down":
        with socket.socket() as closed:  # a port nobody listens on
            closed.bind(("127.0.0.1", 0))
            settings.LEROY_LOG_TSA_URL = f"http://127.0.0.1:{closed.getsockname()[1]}/tsa"
    settings.LEROY_LOG_TSA_TIMEOUT = 0.5  # "slow" answers after 2 s
    tsa.mode = mode

    size = append(snapshot(0), snapshot(1))

    assert size == 2 and selectors.log_size() == 2  # published, and its note served as always
    assert client.get("/log/checkpoint").content.decode().splitlines()[1] == "2"
    [row] = LogTimestamp.objects.all()
    assert (row.tree_size, row.status, row.response, row.gen_time) == (2, "failed", None, None)
    assert row.detail.startswith(detail)
    assert tsa.requests == (0 if mode == "down" else 1)
    assert client.get("/log/checkpoint/timestamp").status_code == 404
    latest = selectors.guarantees().timestamp.latest_checkpoint
    assert (latest.status, latest.detail, latest.token_url) == ("failed", row.detail, None)
    assert selectors.checkpoint().timestamp_token is None
    check = log_timestamp_check()
    assert check["status"] == "degraded"
    assert check["detail"] == f"the latest checkpoint (size 2) has no token: {row.detail}"[:300]


def test_get_provenance_names_the_tsa_and_its_certificate_subject(tsa, tmp_path, django_capture_on_commit_callbacks):
    world = eod_world(tmp_path)
    with universe_settings(world), django_capture_on_commit_callbacks(execute=True):
        eod_run(session=LAST)

    provenance = eod.provenance()
    guarantees = provenance["guarantees"]
    assert guarantees["timestamp_authority"] == "rfc3161"
    assert (guarantees["timestamp"]["url"], guarantees["timestamp"]["tsa_subject"]) == (tsa.url, "CN=Leroy Test TSA")
    assert guarantees["timestamp"]["latest_checkpoint"]["status"] == "granted"
    assert provenance["checkpoint"] == LogCheckpoint.objects.get(tree_size=1).note


def test_beat_retries_the_latest_checkpoint_until_it_has_a_token(tsa, append):
    tsa.mode = "http_error"
    append(snapshot(0))
    tsa.mode = "ok"

    assert log_timestamp_task() is True
    assert log_timestamp_task() is False  # stamped: nothing to do
    assert list(LogTimestamp.objects.order_by("pk").values_list("tree_size", "status")) == [
        (1, "failed"), (1, "granted"),
    ]  # fmt: skip
    assert selectors.guarantees().timestamp.latest_checkpoint.status == "granted"


def test_without_roots_leroy_checks_imprint_and_nonce_and_says_the_chain_is_unchecked(tsa, append, settings):
    settings.LEROY_LOG_TSA_ROOTS = ""
    services.tsa_roots.cache_clear()

    append(snapshot(0))

    assert list(LogTimestamp.objects.values_list("status", "chain_verified")) == [("granted", False)]
    guarantees = selectors.guarantees()
    assert guarantees.timestamp.chain_verified_by_leroy is False
    assert any("but not its signature chain (no LEROY_LOG_TSA_ROOTS)" in line for line in guarantees.not_guaranteed)


def test_unset_no_request_is_made_and_the_guarantees_say_no_independent_timestamp(append, client, settings):
    assert settings.LEROY_LOG_TSA_URL == ""

    append(snapshot(0))

    assert LogTimestamp.objects.count() == 0
    assert client.get("/log/checkpoint/timestamp").status_code == 404
    guarantees = selectors.guarantees().model_dump(mode="json")
    assert guarantees["timestamp_authority"] == "not_configured"
    assert guarantees["timestamp"] == {"kind": "none", "url": None, "tsa_subject": None,
                                       "chain_verified_by_leroy": False, "latest_checkpoint": None,
                                       "latest_stamped_checkpoint": None}  # fmt: skip
    assert guarantees["not_guaranteed"][0] == (
        "No independent timestamp: logged_at is the operator's own clock; no RFC 3161 time-stamp authority is "
        "configured (LEROY_LOG_TSA_URL)."
    )
    assert log_timestamp_check()["status"] == "not_applicable"
    assert log_timestamp_task() is False
    assert json.loads(client.get("/log/checkpoint/timestamp").content)["error"]["code"] == "not_found"


def test_time_stamp_rows_are_append_only(tsa, append):
    append(snapshot(0))
    row = LogTimestamp.objects.get()

    with pytest.raises(AppendOnly):
        row.save()
    with pytest.raises(AppendOnly):
        LogTimestamp.objects.update(status="failed")
    with pytest.raises(AppendOnly):
        row.delete()


@POSTGRES
@pytest.mark.parametrize(
    "sql", ["UPDATE evidence_logtimestamp SET status = 'failed'", "DELETE FROM evidence_logtimestamp"]
)
def test_postgresql_refuses_raw_updates_and_deletes_of_time_stamps(tsa, append, sql):
    append(snapshot(0))

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
    assert list(LogTimestamp.objects.values_list("status", flat=True)) == ["granted"]


@pytest.mark.django_db(transaction=True)
def test_leroy_verify_fetches_the_token_from_the_log_and_checks_it(tsa, live_server, tmp_path):
    services.entries_append([snapshot(0), snapshot(1)])  # committed: its token is requested on commit
    services.entries_append([snapshot(2)])
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    args = ["--log", live_server.url, "--key", selectors.verifier_key(), "--entries", "--timestamp",
            "--tsa-roots", str(tsa.root), "--tsa-cert", str(tsa.cert)]  # fmt: skip

    done = subprocess.run([VERIFY, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

    gen_time = LogTimestamp.objects.get(tree_size=3).gen_time.isoformat().replace("+00:00", "Z")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1:] == [
        f"ok    timestamp: size 3 existed no later than {gen_time} (RFC 3161, CN=Leroy Test TSA)",
        "ok    entries: all 3 entries hash to the checkpoint's root",
    ]
