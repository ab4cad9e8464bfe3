"""The publication log: canonical entries, append-only rows, dense indices under concurrency, signed checkpoints,
the artifact entry on activation, and the daily commitment of answer hashes."""

import base64
import hashlib
import json
import threading
from datetime import UTC, date, datetime
from io import StringIO

import pytest
import rfc8785
import time_machine
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import override_settings
from pydantic import BaseModel

from evidence.memory.services import market_memory_activate
from evidence.models import AnswerReceipt, AppendOnly, LogCheckpoint, LogEntry, MarketMemoryArtifact
from evidence.publication import selectors, services
from evidence.publication.schemas import Receipt
from evidence.publication.signing import format_private_key, signer
from evidence.publication.tasks import answers_commit_task
from evidence.research import analysis as research
from evidence.schemas import LineageArgs
from leroy_verify.merkle import Tree, leaf_hash, verify_inclusion
from leroy_verify.note import open_note, parse_checkpoint, parse_verifier_key

pytestmark = pytest.mark.django_db
POSTGRES = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the trigger exists on PostgreSQL only")


def snapshot(session: str = "2026-07-01", row_count: int = 3) -> dict[str, object]:
    return {"kind": "eod_snapshot", "session": session, "snapshot_sha256": "ab" * 32, "row_count": row_count}


class Answer(BaseModel):
    value: float
    words: str
    receipt: Receipt | None = None


def verified_checkpoint():
    note = selectors.checkpoint_note()
    return parse_checkpoint(open_note(note, parse_verifier_key(selectors.verifier_key())))


def test_an_entry_is_its_rfc8785_bytes_and_its_leaf_hash_is_over_them():
    with time_machine.travel(datetime(2026, 7, 1, 20, 0, 0, 5, tzinfo=UTC), tick=False):
        row = services.entry_append({"row_count": 3, "kind": "eod_snapshot", "snapshot_sha256": "ab" * 32,
                                     "session": "2026-07-01", "note": "é"})  # fmt: skip

    body = {"kind": "eod_snapshot", "logged_at": "2026-07-01T20:00:00.000005Z", "note": "é", "row_count": 3,
            "session": "2026-07-01", "snapshot_sha256": "ab" * 32}  # fmt: skip
    assert row.index == 0
    assert row.body.encode() == rfc8785.dumps(body)
    assert row.leaf_hash == hashlib.sha256(b"\x00" + rfc8785.dumps(body)).hexdigest()


def test_each_batch_is_checkpointed_with_a_signed_note_over_the_tree_root():
    services.entries_append([snapshot("2026-07-01"), snapshot("2026-07-02")])
    services.entry_append(snapshot("2026-07-03"))

    leaves = [bytes.fromhex(h) for h in LogEntry.objects.values_list("leaf_hash", flat=True)]
    assert list(LogCheckpoint.objects.order_by("tree_size").values_list("tree_size", flat=True)) == [2, 3]
    checkpoint = verified_checkpoint()
    assert (checkpoint.origin, checkpoint.size, checkpoint.root) == ("test.leroy.invalid/log", 3, Tree(leaves).root(3))
    assert (
        selectors.verifier_key()
        == "test.leroy.invalid/log+775b8874+" + base64.b64encode(b"\x01" + signer().verifier.public_key).decode()
    )


def test_the_empty_log_serves_a_signed_checkpoint_of_the_empty_tree():
    checkpoint = verified_checkpoint()

    assert (checkpoint.size, checkpoint.root) == (0, hashlib.sha256(b"").digest())


def test_nothing_is_signed_with_a_key_named_for_another_origin(caplog):
    # A var dir first served on port 8000 keeps its generated key named 127.0.0.1:8000/log; served on 8766, the log
    # signed 127.0.0.1:8766/log checkpoints with it, which leroy-verify fails against the log's earlier ones.
    with override_settings(LEROY_LOG_ORIGIN="127.0.0.1:8766/log"):
        with pytest.raises(ImproperlyConfigured) as appended:
            services.entries_append([snapshot()])
        with pytest.raises(services.LogError) as served:  # the empty log's checkpoint: a 503 saying what to set
            selectors.checkpoint_note()

    message = (
        "publication log: the signing key is named test.leroy.invalid/log, not for this server's log origin "
        "127.0.0.1:8766/log (LEROY_LOG_ORIGIN, by default the host of LEROY_PUBLIC_ORIGIN + /log); nothing is signed. "
        "A log keeps its origin: set LEROY_LOG_ORIGIN=test.leroy.invalid/log to go on with the log of that key, or "
        "start a new log under 127.0.0.1:8766/log with a fresh LEROY_VAR_DIR (its database and generated key)."
    )
    assert str(appended.value) == served.value.message == message
    assert served.value.code == "log_unavailable"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("ERROR", message), ("ERROR", message)]
    assert LogEntry.objects.exists() is False
    assert LogCheckpoint.objects.exists() is False


def test_a_log_started_under_another_origin_is_not_appended_to_under_a_new_one(caplog):
    services.entry_append(snapshot("2026-07-01"))
    moved = format_private_key("127.0.0.1:8766/log", Ed25519PrivateKey.generate())

    with (
        override_settings(LEROY_LOG_ORIGIN="127.0.0.1:8766/log", LEROY_LOG_SIGNING_KEY=moved),
        pytest.raises(services.LogError) as refused,
    ):
        services.entry_append(snapshot("2026-07-02"))

    assert refused.value.code == "log_origin_changed"
    assert refused.value.message == (
        "publication log: the log in this database is test.leroy.invalid/log (its latest checkpoint's origin), not "
        "this server's log origin 127.0.0.1:8766/log; nothing is appended. Set LEROY_LOG_ORIGIN=test.leroy.invalid/log "
        "with the key that signed it, or start a new log with a fresh database (make demo: a fresh LEROY_VAR_DIR)."
    )
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("ERROR", refused.value.message)]
    assert list(LogEntry.objects.values_list("index", flat=True)) == [0]
    assert list(LogCheckpoint.objects.values_list("tree_size", flat=True)) == [1]


@pytest.mark.parametrize(
    "entry",
    [
        {"kind": "unknown", "session": "x"},
        {"kind": "eod_snapshot", "session": "2026-07-01", "snapshot_sha256": "ab" * 32},
        {**snapshot(), "logged_at": "2020-01-01T00:00:00Z"},
        {**snapshot(), "row_count": 2**60},  # not an exact JSON number
    ],
)
def test_a_malformed_entry_is_refused_and_nothing_is_appended(entry):
    with pytest.raises(services.LogError):
        services.entries_append([snapshot(), entry])

    assert LogEntry.objects.exists() is False
    assert LogCheckpoint.objects.exists() is False


def test_the_orm_refuses_to_change_or_delete_log_rows_on_every_database():
    row = services.entry_append(snapshot())
    checkpoint = LogCheckpoint.objects.get()

    for attempt in (
        lambda: LogEntry.objects.filter(index=0).update(kind="forward_overlay"),
        lambda: LogEntry.objects.all().delete(),
        row.delete,
        row.save,
        checkpoint.save,
        lambda: LogCheckpoint.objects.update(note=""),
    ):
        with pytest.raises(AppendOnly):
            attempt()
    assert LogEntry.objects.get().body == row.body


@POSTGRES
@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE evidence_logentry SET body = '{}'",
        "DELETE FROM evidence_logentry",
        "UPDATE evidence_logcheckpoint SET note = ''",
        "DELETE FROM evidence_logcheckpoint",
    ],
)
def test_postgresql_refuses_raw_updates_and_deletes(sql):
    row = services.entry_append(snapshot())

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
    assert LogEntry.objects.get().body == row.body
    assert LogCheckpoint.objects.count() == 1


@POSTGRES
@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_get_dense_gap_free_indices_and_one_checkpoint_each():
    errors: list[BaseException] = []

    def append(worker: int) -> None:
        try:
            for i in range(5):
                services.entries_append([snapshot(row_count=worker * 100 + i)] * 2)
        except BaseException as error:  # surfaced below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert list(LogEntry.objects.values_list("index", flat=True)) == list(range(40))
    assert sorted(LogCheckpoint.objects.values_list("tree_size", flat=True)) == list(range(2, 41, 2))
    leaves = [bytes.fromhex(h) for h in LogEntry.objects.values_list("leaf_hash", flat=True)]
    for cp in LogCheckpoint.objects.all():
        assert cp.root_hash == Tree(leaves).root(cp.tree_size).hex()


def test_activating_an_artifact_logs_it_once_until_another_is_served(tmp_path):
    def artifact(sha: str) -> MarketMemoryArtifact:
        return MarketMemoryArtifact.objects.create(
            sha256=sha, version=f"mm-{sha[:4]}", path="x", manifest={"data_as_of": "2026-06-30"},
            built_at=datetime(2026, 7, 1, tzinfo=UTC),
        )  # fmt: skip

    first, second = artifact("1" * 64), artifact("2" * 64)
    market_memory_activate(artifact=first)
    market_memory_activate(artifact=first)
    market_memory_activate(artifact=second)
    market_memory_activate(artifact=first)

    bodies = [json.loads(body) for body in LogEntry.objects.values_list("body", flat=True)]
    assert [(b["kind"], b["artifact_sha256"]) for b in bodies] == [
        ("market_memory_artifact", "1" * 64), ("market_memory_artifact", "2" * 64),
        ("market_memory_artifact", "1" * 64),
    ]  # fmt: skip
    assert bodies[0]["artifact_version"] == "mm-1111" and bodies[0]["sessions_through"] == "2026-06-30"


def test_an_artifact_with_a_forward_overlay_commits_the_overlay_beside_it_in_one_checkpoint():
    overlay = {"status": "available", "symbols": 2, "ready_rows": 780, "first_session": "2026-07-01",
               "last_session": "2026-07-09", "sessions": 7}  # fmt: skip
    manifest = {"data_as_of": "2026-07-09", "corpus": {"overlay_tickers": ["ALFA", "BRVO"]},
                "coverage": {"historical": {"status": "available"}, "forward_overlay": overlay}}  # fmt: skip
    served = MarketMemoryArtifact.objects.create(
        sha256="3" * 64, version="mm-3333", path="x", manifest=manifest, built_at=datetime(2026, 7, 10, tzinfo=UTC)
    )

    market_memory_activate(artifact=served)

    bodies = [json.loads(body) for body in LogEntry.objects.order_by("index").values_list("body", flat=True)]
    described = {"tickers": ["ALFA", "BRVO"], "coverage": overlay}
    assert [b["kind"] for b in bodies] == ["market_memory_artifact", "forward_overlay"]
    assert {k: v for k, v in bodies[1].items() if k != "logged_at"} == {
        "kind": "forward_overlay", "artifact_sha256": "3" * 64,
        "overlay_sha256": hashlib.sha256(rfc8785.dumps(described)).hexdigest(),
        "sessions_through": "2026-07-09", "first_session": "2026-07-01", "symbols": 2,
    }  # fmt: skip
    assert LogCheckpoint.objects.count() == 1  # one append batch, one signed checkpoint


def answered(user, value: float, at: datetime) -> Answer:
    with time_machine.travel(at, tick=False):
        return services.receipt_attach(user=user, tool="search_market_memory", answer=Answer(value=value, words="é"))


def test_a_receipt_is_the_hash_of_the_answer_json_without_the_receipt(owner):
    answer = answered(owner, 0.1, datetime(2026, 7, 1, 15, tzinfo=UTC))

    sent = json.loads(json.dumps(answer.model_dump(mode="json")))  # what the caller receives
    receipt = sent.pop("receipt")
    assert receipt["answer_sha256"] == hashlib.sha256(rfc8785.dumps(sent)).hexdigest()
    assert receipt["answer_id"].startswith("ans_") and receipt["day"] == "2026-07-01"
    assert receipt["log_index"] is None
    stored = AnswerReceipt.objects.get()
    assert (stored.user, stored.answer_sha256, stored.log_index) == (owner, receipt["answer_sha256"], None)


def test_the_daily_root_commits_exactly_that_days_answers(owner, outsider):
    before = answered(owner, 1.0, datetime(2026, 6, 30, 23, 59, tzinfo=UTC))
    day = [answered(owner, 2.0, datetime(2026, 7, 1, 0, 0, tzinfo=UTC)),
           answered(outsider, 3.0, datetime(2026, 7, 1, 14, tzinfo=UTC)),
           answered(owner, 4.0, datetime(2026, 7, 1, 23, 59, tzinfo=UTC))]  # fmt: skip
    after = answered(owner, 5.0, datetime(2026, 7, 2, 0, 0, tzinfo=UTC))

    entry = services.answers_commit(day=date(2026, 7, 1))

    body = json.loads(entry.body)
    leaves = [leaf_hash(bytes.fromhex(a.receipt.answer_sha256)) for a in day]
    assert (body["kind"], body["day"], body["answer_count"]) == ("daily_answers_root", "2026-07-01", 3)
    assert body["root_sha256"] == Tree(leaves).root(3).hex()
    committed = AnswerReceipt.objects.filter(log_index=entry.index).values_list("answer_id", flat=True)
    assert sorted(committed) == sorted(a.receipt.answer_id for a in day)
    assert AnswerReceipt.objects.get(answer_id=before.receipt.answer_id).log_index is None
    assert AnswerReceipt.objects.get(answer_id=after.receipt.answer_id).log_index is None
    assert services.answers_commit(day=date(2026, 7, 1)) is None  # nothing left: no empty entry


def test_later_answers_of_a_committed_day_go_into_the_next_commit_and_due_days_commit_in_order(owner):
    answered(owner, 1.0, datetime(2026, 7, 1, 15, tzinfo=UTC))
    first = services.answers_commit(day=date(2026, 7, 1))
    late = answered(owner, 2.0, datetime(2026, 7, 1, 23, tzinfo=UTC))
    answered(owner, 3.0, datetime(2026, 7, 2, 15, tzinfo=UTC))
    answered(owner, 4.0, datetime(2026, 7, 3, 15, tzinfo=UTC))

    entries = services.answers_commit_due(through=date(2026, 7, 2))

    assert [json.loads(e.body)["day"] for e in entries] == ["2026-07-01", "2026-07-02"]
    assert AnswerReceipt.objects.get(answer_id=late.receipt.answer_id).log_index == entries[0].index != first.index
    assert AnswerReceipt.objects.filter(log_index__isnull=True).count() == 1


def test_an_answer_proof_binds_the_hash_to_the_signed_checkpoint(owner, outsider):
    answers = [answered(u, float(i), datetime(2026, 7, 1, 15, i, tzinfo=UTC)) for i, u in
               enumerate([outsider, owner, outsider])]  # fmt: skip
    services.entry_append(snapshot())
    services.answers_commit(day=date(2026, 7, 1))
    services.entry_append(snapshot("2026-07-02"))

    proof = selectors.answer_proof(user=owner, answer_id=answers[1].receipt.answer_id)

    assert proof.status == "committed" and proof.answer_sha256 == answers[1].receipt.answer_sha256
    day_root = bytes.fromhex(proof.day_tree.root_sha256)
    verify_inclusion(proof.day_tree.index, proof.day_tree.size, leaf_hash(bytes.fromhex(proof.answer_sha256)),
                     [base64.b64decode(h) for h in proof.day_tree.hashes], day_root)  # fmt: skip
    assert proof.log_entry.entry["root_sha256"] == proof.day_tree.root_sha256
    checkpoint = parse_checkpoint(open_note(proof.checkpoint, parse_verifier_key(proof.verifier_key)))
    assert (proof.log_inclusion.index, proof.log_inclusion.tree_size, checkpoint.size) == (1, 3, 3)
    verify_inclusion(1, 3, leaf_hash(rfc8785.dumps(proof.log_entry.entry)),
                     [base64.b64decode(h) for h in proof.log_inclusion.hashes], checkpoint.root)  # fmt: skip


def test_an_answer_proof_is_for_its_owner_only_and_says_when_not_yet_committed(owner, outsider):
    answer = answered(owner, 1.0, datetime(2026, 7, 1, 15, tzinfo=UTC))

    pending = selectors.answer_proof(user=owner, answer_id=answer.receipt.answer_id)

    assert (pending.status, pending.day_tree, pending.log_inclusion) == ("not_committed", None, None)
    with pytest.raises(services.LogError) as refused:
        selectors.answer_proof(user=outsider, answer_id=answer.receipt.answer_id)
    assert refused.value.code == "not_found"


def test_commit_answers_commits_a_given_day_or_every_due_day_and_refuses_a_bad_date(owner):
    answered(owner, 1.0, datetime(2026, 7, 1, 15, tzinfo=UTC))
    answered(owner, 2.0, datetime(2026, 7, 2, 15, tzinfo=UTC))
    out = StringIO()

    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("commit_answers", "--date", "July 1st", stdout=out)
    assert LogEntry.objects.exists() is False
    call_command("commit_answers", "--date", "2026-07-01", stdout=out)
    with time_machine.travel(datetime(2026, 7, 3, 21, 30, tzinfo=UTC), tick=False):
        call_command("commit_answers", stdout=out)
        call_command("commit_answers", stdout=out)

    lines = out.getvalue().splitlines()
    assert [line.split(" ")[0] for line in lines] == ["log[0]", "log[1]", "nothing"]
    assert '"day":"2026-07-02"' in lines[1]


def test_the_beat_task_commits_every_day_through_today(owner):
    answered(owner, 1.0, datetime(2026, 7, 1, 15, tzinfo=UTC))
    answered(owner, 2.0, datetime(2026, 7, 3, 15, tzinfo=UTC))
    answered(owner, 3.0, datetime(2026, 7, 4, 15, tzinfo=UTC))

    with time_machine.travel(datetime(2026, 7, 3, 21, 30, tzinfo=UTC), tick=False):
        assert answers_commit_task.delay().get() == 2

    assert AnswerReceipt.objects.filter(log_index__isnull=True).count() == 1


def test_data_lineage_cites_the_latest_signed_checkpoint(world):
    lineage = research.data_lineage(args=LineageArgs(), user=None)

    cited = lineage.publication_log
    assert cited is not None and cited.checkpoint == selectors.checkpoint_note()
    assert cited.tree_size == 2  # the world's build logged its artifact and its forward overlay
    assert json.loads(LogEntry.objects.get(index=0).body)["artifact_sha256"] == world.sha256


def test_proofs_never_come_from_a_rolled_back_prefix():
    with transaction.atomic():
        sid = transaction.savepoint_create()
        services.entries_append([snapshot("2026-07-01"), snapshot("2026-07-02"), snapshot("2026-07-03")])
        selectors.inclusion_proof(index=0, tree_size=3)  # this process now holds that tree
        transaction.savepoint_rollback(sid)
    rows = services.entries_append([snapshot("2026-08-01"), snapshot("2026-08-02"), snapshot("2026-08-03")])

    proof = selectors.inclusion_proof(index=0, tree_size=3)

    root = verified_checkpoint().root
    assert base64.b64decode(proof.root_hash) == root
    verify_inclusion(0, 3, bytes.fromhex(rows[0].leaf_hash), [base64.b64decode(h) for h in proof.hashes], root)


def test_a_rest_mirror_answer_carries_a_receipt_that_matches_the_json_it_returned(fed_world, client, owner):
    client.force_login(owner)
    client.cookies["csrftoken"] = "a" * 32

    response = client.post("/api/v1/evidence/evaluate_current_setup", {"symbol": "ALFA", "side": "buy"},
                           content_type="application/json", headers={"X-CSRFToken": "a" * 32})  # fmt: skip

    body = response.json()
    receipt = body.pop("receipt")
    assert receipt["answer_id"] == body["evaluation_id"]
    assert receipt["answer_sha256"] == hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def test_an_entry_appended_by_a_clock_behind_the_log_is_stamped_no_earlier_than_the_one_before():
    with time_machine.travel(datetime(2026, 12, 7, 4, 1, tzinfo=UTC), tick=False):
        first = services.entry_append(snapshot("2026-07-01"))
    with time_machine.travel(datetime(2026, 5, 19, 14, 30, tzinfo=UTC), tick=False):  # another process's replay clock
        second = services.entry_append(snapshot("2026-07-02"))

    assert second.logged_at == first.logged_at == datetime(2026, 12, 7, 4, 1, tzinfo=UTC)
    assert json.loads(second.body)["logged_at"] == "2026-12-07T04:01:00Z"
