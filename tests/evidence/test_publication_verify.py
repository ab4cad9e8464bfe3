"""`leroy-verify` in a clean process (no Django settings, none of the server's packages imported): it verifies the
log, its entries, an answer proof and end-of-day evidence against its snapshot's entry, and it catches edited,
deleted and reordered entries, a forked log, a wrong key and changed end-of-day evidence."""

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
import rfc8785
import time_machine
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import transaction
from pydantic import BaseModel

from evidence.eod import selectors as eod
from evidence.eod.schemas import HeldoutOut, ReplayOut, WalkForwardOut
from evidence.eod.services import eod_run
from evidence.models import LogCheckpoint, LogEntry
from evidence.publication import selectors, services
from evidence.publication.schemas import Receipt
from evidence.publication.signing import format_private_key, parse_private_key
from tests.evidence.eod_world import LAST, eod_world, universe_settings

pytestmark = pytest.mark.django_db
VERIFY = shutil.which("leroy-verify", path=str(Path(sys.executable).parent))
ROOT = Path(__file__).resolve().parents[2]


class Answer(BaseModel):
    evaluation_id: str
    average_return_pct: float | None
    note: str
    receipt: Receipt | None = None


def verify(*args: str | Path, cwd: Path) -> tuple[int, list[str]]:
    # No DJANGO_SETTINGS_MODULE, no LEROY_*, no database; this checkout's leroy_verify, not the one installed.
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([VERIFY, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.stderr == ""
    return done.returncode, done.stdout.splitlines()


def snapshot(n: int) -> dict[str, object]:
    return {"kind": "eod_snapshot", "session": f"2026-06-{n + 1:02d}", "snapshot_sha256": f"{n:064x}", "row_count": n}


@pytest.fixture
def files(tmp_path, client):
    """A log of 5 entries with an earlier checkpoint kept at size 2, written out as a client would save them."""
    services.entries_append([snapshot(0), snapshot(1)])
    (tmp_path / "earlier.txt").write_text(client.get("/log/checkpoint").content.decode())
    services.entries_append([snapshot(2), snapshot(3), snapshot(4)])
    (tmp_path / "checkpoint.txt").write_text(client.get("/log/checkpoint").content.decode())
    (tmp_path / "key.txt").write_text(client.get("/.well-known/leroy-log-key").content.decode())
    (tmp_path / "entries.json").write_text(client.get("/log/entries", {"start": 0, "end": 5}).content.decode())
    proof = client.get("/log/proof/consistency", {"first": 2, "second": 5}).content.decode()
    (tmp_path / "consistency.json").write_text(proof)
    return tmp_path


def test_the_verifier_imports_nothing_of_the_server_and_no_django(tmp_path):
    code = ("import sys, leroy_verify.cli; bad = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'django', 'evidence', 'accounts', 'billing', 'backtests', 'alerts', 'leroy'}); print(bad)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=True)  # fmt: skip

    assert done.stdout.strip() == "[]"


def test_a_whole_log_from_files_verifies_one_line_per_check(files):
    code, lines = verify("--key", files / "key.txt", "--checkpoint", files / "checkpoint.txt", "--earlier",
                         files / "earlier.txt", "--consistency", files / "consistency.json", "--entries",
                         files / "entries.json", cwd=files)  # fmt: skip

    assert code == 0
    assert [line.split(":")[0] for line in lines] == [
        "ok    checkpoint signature", "ok    earlier checkpoint signature", "ok    consistency", "ok    entries",
    ]  # fmt: skip
    assert "test.leroy.invalid/log size 5" in lines[0]
    assert lines[3] == "ok    entries: all 5 entries hash to the checkpoint's root"


def tampered(files: Path, change) -> Path:
    body = json.loads((files / "entries.json").read_text())
    change(body["entries"])
    (files / "tampered.json").write_text(json.dumps(body))
    return files / "tampered.json"


def edit(entries):
    entries[2]["entry"]["row_count"] = 99


def edit_and_rehash(entries):
    import hashlib

    import rfc8785

    entries[2]["entry"]["row_count"] = 99
    entries[2]["leaf_hash"] = hashlib.sha256(b"\x00" + rfc8785.dumps(entries[2]["entry"])).hexdigest()


def delete(entries):
    del entries[1]


def reorder(entries):
    entries[1], entries[2] = entries[2], entries[1]


def reorder_and_renumber(entries):
    reorder(entries)
    entries[1]["index"], entries[2]["index"] = 1, 2


def delete_last(entries):
    entries.pop()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (edit, "its leaf_hash is not the hash of its RFC 8785 bytes"),
        (edit_and_rehash, "their tree root is not the checkpoint's"),
        (delete, "index 2 where 1 was due"),
        (reorder, "index 2 where 1 was due"),
        (reorder_and_renumber, "their tree root is not the checkpoint's"),
        (delete_last, "4 entries for a checkpoint of size 5"),
    ],
)
def test_tampered_entries_are_detected(files, change, reason):
    code, lines = verify("--key", files / "key.txt", "--checkpoint", files / "checkpoint.txt", "--entries",
                         tampered(files, change), cwd=files)  # fmt: skip

    assert code == 1
    assert lines[-1].startswith("FAIL  entries: ") and reason in lines[-1]


def test_a_checkpoint_signed_by_another_key_is_refused(files):
    other = parse_private_key(format_private_key("test.leroy.invalid/log", Ed25519PrivateKey.generate()))
    forged = other.sign((files / "checkpoint.txt").read_text().split("\n\n")[0] + "\n")
    (files / "forged.txt").write_text(forged)

    wrong_key = verify("--key", str(other.verifier), "--checkpoint", files / "checkpoint.txt", cwd=files)
    forged_note = verify("--key", files / "key.txt", "--checkpoint", files / "forged.txt", cwd=files)
    edited_note = (files / "checkpoint.txt").read_text().replace("\n5\n", "\n6\n")
    (files / "edited.txt").write_text(edited_note)
    edited = verify("--key", files / "key.txt", "--checkpoint", files / "edited.txt", cwd=files)

    expected = (
        f"FAIL  checkpoint signature: note: no signature by {other.verifier.name}+{other.verifier.key_hash.hex()}"
    )
    assert wrong_key == (1, [expected])
    assert forged_note == (1, ["FAIL  checkpoint signature: note: no signature by test.leroy.invalid/log+775b8874"])
    assert edited == (1, ["FAIL  checkpoint signature: note: the signature by test.leroy.invalid/log does not verify"])


def test_a_forked_log_fails_the_consistency_check(tmp_path, client):
    # The same key once signed a tree of size 2 whose entries differ from those the log holds now.
    with transaction.atomic():
        sid = transaction.savepoint_create()
        services.entries_append([snapshot(7), snapshot(8)])
        (tmp_path / "fork.txt").write_text(client.get("/log/checkpoint").content.decode())
        transaction.savepoint_rollback(sid)
    services.entries_append([snapshot(n) for n in range(5)])
    (tmp_path / "checkpoint.txt").write_text(client.get("/log/checkpoint").content.decode())
    proof = client.get("/log/proof/consistency", {"first": 2, "second": 5}).content.decode()
    (tmp_path / "consistency.json").write_text(proof)

    code, lines = verify("--key", str(services.signer().verifier), "--checkpoint", tmp_path / "checkpoint.txt",
                         "--earlier", tmp_path / "fork.txt", "--consistency", tmp_path / "consistency.json",
                         cwd=tmp_path)  # fmt: skip

    assert code == 1
    assert lines[1].startswith("ok    earlier checkpoint signature: test.leroy.invalid/log size 2")
    assert lines[-1].startswith("FAIL  consistency: the tree of size 2 is not a prefix of the tree of size 5")


def test_an_earlier_checkpoint_of_another_origin_fails_the_consistency_check(tmp_path, client):
    # Before the server refused it, a demo served on another port than its var dir's first signed the log's later
    # checkpoints under the new origin with the key named for the old one: consistent trees, but two logs by name.
    services.entries_append([snapshot(0), snapshot(1)])
    (tmp_path / "earlier.txt").write_text(client.get("/log/checkpoint").content.decode())
    services.entries_append([snapshot(2)])
    root = base64.b64encode(bytes.fromhex(LogCheckpoint.objects.get(tree_size=3).root_hash)).decode()
    (tmp_path / "checkpoint.txt").write_text(services.signer().sign(f"127.0.0.1:8811/log\n3\n{root}\n"))

    code, lines = verify("--key", str(services.signer().verifier), "--checkpoint", tmp_path / "checkpoint.txt",
                         "--earlier", tmp_path / "earlier.txt", cwd=tmp_path)  # fmt: skip

    assert code == 1
    assert lines[0].startswith("ok    checkpoint signature: 127.0.0.1:8811/log size 3")
    assert lines[0].endswith(" by test.leroy.invalid/log, a key not named for the origin")
    assert lines[-1] == (
        "FAIL  consistency: the earlier checkpoint is of log test.leroy.invalid/log, the later of 127.0.0.1:8811/log"
    )


@pytest.fixture
def answered(files, owner, outsider):
    """`files` with answer.json (the owner's answer as the agent received it) and proof.json (its committed proof)."""
    with time_machine.travel(datetime(2026, 7, 1, 15, tzinfo=UTC), tick=False):
        answers = [
            services.receipt_attach(user=user, tool="evaluate_current_setup",
                                    answer=Answer(evaluation_id=f"eval_{i}", average_return_pct=0.1 * i, note="é"))
            for i, user in enumerate([outsider, owner, outsider])
        ]  # fmt: skip
    services.answers_commit(day=date(2026, 7, 1))
    services.entries_append([snapshot(9)])
    received = json.loads(json.dumps(answers[1].model_dump(mode="json")))  # the structured content the agent got
    (files / "answer.json").write_text(json.dumps(received, indent=2))
    proof = selectors.answer_proof(user=owner, answer_id="eval_1").model_dump(mode="json")
    (files / "proof.json").write_text(json.dumps(proof))
    return files


def test_an_answer_proof_verifies_offline_and_a_changed_answer_does_not(answered):
    files = answered
    received = json.loads((files / "answer.json").read_text())

    code, lines = verify("--key", files / "key.txt", "--answer", files / "answer.json", "--proof",
                         files / "proof.json", cwd=files)  # fmt: skip
    received["average_return_pct"] = 0.2
    (files / "changed.json").write_text(json.dumps(received))
    changed = verify("--key", files / "key.txt", "--answer", files / "changed.json", "--proof", files / "proof.json",
                     cwd=files)  # fmt: skip

    assert code == 0
    assert [line.split(":")[0] for line in lines] == [
        "ok    answer hash", "ok    day tree", "ok    proof checkpoint signature", "ok    log inclusion",
    ]  # fmt: skip
    assert lines[1] == "ok    day tree: answer 1 of 3 committed on 2026-07-01"
    assert lines[3] == "ok    log inclusion: day root is entry 5 of the signed tree of size 7"
    assert changed == (1, ["FAIL  answer: its RFC 8785 hash is not the proof's answer_sha256 (the answer was changed)"])


NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("name", "change", "reason"),
    [
        ("answer.json", lambda answer: [answer], "TypeError"),
        ("answer.json", lambda answer: None, "AttributeError"),
        ("answer.json", lambda answer: {**answer, "receipt": "r"}, "AttributeError"),
        ("proof.json", lambda proof: {**proof, "checkpoint": 7}, "AttributeError"),
        ("proof.json", lambda proof: {**proof, "day_tree": []}, "TypeError"),
        ("proof.json", lambda proof: {**proof, "log_entry": {**proof["log_entry"], "entry": "e"}}, "AttributeError"),
        ("proof.json", lambda proof: NESTED, "RecursionError"),
    ],
)  # fmt: skip
def test_an_answer_or_proof_of_another_shape_fails_on_one_line_without_a_traceback(answered, name, change, reason):
    # A proof comes from the log's operator, whom the check does not trust: a malformed one once ended in a traceback.
    changed = change(json.loads((answered / name).read_text()))
    (answered / name).write_text(changed if isinstance(changed, str) else json.dumps(changed))

    code, lines = verify("--key", answered / "key.txt", "--answer", answered / "answer.json", "--proof",
                         answered / "proof.json", cwd=answered)  # fmt: skip

    assert code == 1
    assert len([line for line in lines if line.startswith("FAIL")]) == 1
    assert lines[-1].startswith(f"FAIL  input: {reason}: ")


@pytest.fixture
def published(tmp_path, client):
    """One end-of-day snapshot in the log, and its replay, held-out and walk-forward answers as the tools serve them."""
    world = eod_world(tmp_path)
    with universe_settings(world):
        eod_run(session=LAST)
    answers = {
        "replay.json": ReplayOut.model_validate(eod.replay(symbol=None, offset=0, limit=50)),
        "replay_alfa.json": ReplayOut.model_validate(eod.replay(symbol="ALFA", offset=0, limit=200)),
        "heldout.json": HeldoutOut.model_validate(eod.heldout()),
        "walk_forward.json": WalkForwardOut.model_validate(eod.walk_forward(symbol=None)),
        "walk_forward_alfa.json": WalkForwardOut.model_validate(eod.walk_forward(symbol="ALFA")),
        "walk_forward_chrl.json": WalkForwardOut.model_validate(eod.walk_forward(symbol="CHRL")),
    }
    for name, answer in answers.items():
        (tmp_path / name).write_text(answer.model_dump_json())
    (tmp_path / "checkpoint.txt").write_text(client.get("/log/checkpoint").content.decode())
    (tmp_path / "key.txt").write_text(client.get("/.well-known/leroy-log-key").content.decode())
    (tmp_path / "entries.json").write_text(client.get("/log/entries", {"start": 0, "end": 1}).content.decode())
    return tmp_path


def verify_eod(files: Path, answer: str) -> tuple[int, list[str]]:
    return verify("--key", files / "key.txt", "--checkpoint", files / "checkpoint.txt", "--entries",
                  files / "entries.json", "--eod", files / answer, cwd=files)  # fmt: skip


NOT_LOGGED = "note  eod: not checked against the log: last_updated, disclaimer"


@pytest.mark.parametrize(
    ("answer", "lines"),
    [
        ("heldout.json", [
            "ok    eod answer hash: first and last and rows hash to {calculation_sha256}",
            "ok    eod evidence: first and last and rows are what entry 0 committed for the 2023-02-28 snapshot "
            "(heldout_sha256)",
            "ok    eod as_of and source: 2023-02-28 and synthetic are the session and source entry 0 committed",
            "ok    eod statement: evidence_class and reuse_admission are what entry 0 committed "
            "(heldout_statement_sha256)",
            "ok    eod row count: row_count 2 is the number of rows",
            NOT_LOGGED,
        ]),
        ("walk_forward.json", [
            "ok    eod answer hash: components and rows hash to {calculation_sha256}",
            "ok    eod evidence: components and rows are what entry 0 committed for the 2023-02-28 snapshot "
            "(walk_forward_sha256)",
            "ok    eod as_of and source: 2023-02-28 and synthetic are the session and source entry 0 committed",
            "ok    eod statement: method and inputs_rehashed are what entry 0 committed "
            "(walk_forward_statement_sha256)",
            NOT_LOGGED,
        ]),
        ("replay.json", [  # the universe summary cannot show the hash of every symbol's legs: it has its own
            "ok    eod evidence: the stated calculation_sha256 is the replay_sha256 entry 0 committed for the "
            "2023-02-28 snapshot",
            "ok    eod as_of and source: 2023-02-28 and synthetic are the session and source entry 0 committed",
            "ok    eod statement: label and symbols are what entry 0 committed (replay_statement_sha256)",
            "ok    eod replay summary: the universe summary is what entry 0 committed (replay_summary_sha256)",
            NOT_LOGGED,
        ]),
    ],
)  # fmt: skip
def test_end_of_day_evidence_verifies_against_its_snapshots_entry_field_by_field(published, answer, lines):
    stated = json.loads((published / answer).read_text())["calculation_sha256"]

    code, printed = verify_eod(published, answer)

    assert code == 0
    assert printed[0].startswith("ok    checkpoint signature: ")
    assert printed[1:] == [
        "ok    entries: all 1 entries hash to the checkpoint's root",
        *[line.format(calculation_sha256=stated) for line in lines],
    ]


def edited(published: Path, answer: str, change) -> str:
    data = json.loads((published / answer).read_text())
    change(data)
    (published / "edited.json").write_text(json.dumps(data))
    return "edited.json"


def test_a_universe_replay_whose_summary_was_edited_fails_though_its_stated_hash_is_the_logged_one(published):
    def change(answer):
        answer["summary"]["win_rate"] = 0.9
        answer["summary"]["average_return"] = 0.25

    code, lines = verify_eod(published, edited(published, "replay.json", change))

    assert code == 1
    assert lines[-2] == "ok    eod statement: label and symbols are what entry 0 committed (replay_statement_sha256)"
    assert lines[-1] == (
        "FAIL  eod: the universe summary is not the one entry 0 committed (replay_summary_sha256; the answer was "
        "changed)"
    )


@pytest.mark.parametrize(
    ("answer", "change", "failure"),
    [
        ("replay_alfa.json", {"as_of": "2030-01-01"},
         "eod: the answer's as_of 2030-01-01 is not the session 2023-02-28 entry 0 committed (the answer was changed)"),
        ("replay_alfa.json", {"source": "vendor"},
         "eod: the answer's source 'vendor' is not the source 'synthetic' entry 0 committed (the answer was changed)"),
        ("replay_alfa.json", {"label": "validation"},
         "eod: the answer's label and symbols are not what entry 0 committed (replay_statement_sha256; the answer "
         "was changed)"),
        ("replay.json", {"symbols": ["ALFA"]},
         "eod: the answer's label and symbols are not what entry 0 committed (replay_statement_sha256; the answer "
         "was changed)"),
        ("replay.json", {"total_legs": 7},
         "eod: an answer without a symbol holds no legs, total_legs or symbol_proof (the answer was changed)"),
        ("heldout.json", {"evidence_class": "test"},
         "eod: the answer's evidence_class and reuse_admission are not what entry 0 committed "
         "(heldout_statement_sha256; the answer was changed)"),
        ("heldout.json", {"source": "vendor"},
         "eod: the answer's source 'vendor' is not the source 'synthetic' entry 0 committed (the answer was changed)"),
        ("heldout.json", {"row_count": 99}, "eod: row_count 99 is not the number of rows (2; the answer was changed)"),
        ("walk_forward.json", {"method": "Chosen on the scored year itself."},
         "eod: the answer's method and inputs_rehashed are not what entry 0 committed "
         "(walk_forward_statement_sha256; the answer was changed)"),
    ],
    ids=["replay_as_of", "replay_source", "replay_label", "replay_symbols", "universe_legs", "heldout_class",
         "heldout_source", "heldout_row_count", "walk_forward_method"],
)  # fmt: skip
def test_an_answer_whose_trust_labels_were_changed_fails(published, answer, change, failure):
    code, lines = verify_eod(published, edited(published, answer, lambda data: data.update(change)))

    assert code == 1
    assert [line for line in lines if line.startswith("FAIL")] == ["FAIL  " + failure]


def older_entry(published: Path, client, *, without: frozenset[str] = frozenset()) -> None:
    """Append the published entry again as entries were logged before answers' sources, statements and the universe
    summary were committed (and `without` other fields), under another snapshot hash, and save the grown log."""
    body = json.loads(LogEntry.objects.get(index=0).body)
    later = {"logged_at", "source", "replay_summary_sha256", "replay_statement_sha256", "heldout_statement_sha256",
             "walk_forward_statement_sha256", *without}  # fmt: skip
    services.entry_append({**{k: v for k, v in body.items() if k not in later}, "snapshot_sha256": "ab" * 32})
    (published / "checkpoint.txt").write_text(client.get("/log/checkpoint").content.decode())
    (published / "entries.json").write_text(client.get("/log/entries", {"start": 0, "end": 2}).content.decode())


@pytest.mark.parametrize(
    ("answer", "unchecked"),
    [
        ("heldout.json", "source, evidence_class, reuse_admission"),
        ("walk_forward.json", "source, method, inputs_rehashed"),
        ("replay.json", "source, label, symbols, summary"),
    ],
)
def test_an_answer_of_an_entry_logged_before_its_statement_says_what_it_did_not_check(
    published, client, answer, unchecked
):
    older_entry(published, client)
    data = json.loads((published / answer).read_text())
    (published / "older.json").write_text(json.dumps({**data, "snapshot_sha256": "ab" * 32}))

    code, lines = verify_eod(published, "older.json")

    assert code == 0
    assert "ok    eod as_of: 2023-02-28 is the session entry 1 committed" in lines
    assert not [line for line in lines if line.startswith(("ok    eod statement", "ok    eod replay summary"))]
    assert lines[-1] == f"note  eod: not checked against the log: {unchecked}, last_updated, disclaimer"


def test_a_changed_heldout_row_fails_whether_or_not_its_hash_was_recomputed(published):
    answer = json.loads((published / "heldout.json").read_text())
    answer["rows"][0]["engine_return"] += 0.01
    (published / "edited.json").write_text(json.dumps(answer))
    hashed = {name: answer[name] for name in ("first", "last", "rows")}
    answer["calculation_sha256"] = hashlib.sha256(rfc8785.dumps(hashed)).hexdigest()  # as an operator would
    (published / "rehashed.json").write_text(json.dumps(answer))

    edited = verify_eod(published, "edited.json")
    rehashed = verify_eod(published, "rehashed.json")

    assert edited[0] == rehashed[0] == 1
    assert edited[1][-1] == (
        "FAIL  eod: the answer's fields do not hash to its calculation_sha256 (the answer was changed, or asked for "
        "one symbol: save the answer for every symbol)"
    )
    assert rehashed[1][-2].startswith("ok    eod answer hash: first and last and rows hash to ")
    assert rehashed[1][-1] == (
        "FAIL  eod: entry 0 committed another heldout_sha256 (the evidence was changed after it was logged)"
    )


def test_one_symbols_replay_is_checked_as_a_leaf_of_its_entrys_root(published):
    answer = json.loads((published / "replay_alfa.json").read_text())
    legs = answer["total_legs"]

    code, lines = verify_eod(published, "replay_alfa.json")

    assert code == 0
    assert lines[1:] == [
        "ok    entries: all 1 entries hash to the checkpoint's root",
        "ok    eod evidence: the stated calculation_sha256 is the replay_sha256 entry 0 committed for the 2023-02-28 "
        "snapshot",
        "ok    eod as_of and source: 2023-02-28 and synthetic are the session and source entry 0 committed",
        "ok    eod statement: label and symbols are what entry 0 committed (replay_statement_sha256)",
        f"ok    eod replay symbol: ALFA's summary and {legs} legs are leaf 0 of the 2-symbol replay root entry 0 "
        "committed",
        NOT_LOGGED,
    ]


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        (lambda a: a["legs"][0].update({"return": a["legs"][0]["return"] + 0.01}),
         "eod: ALFA's summary and legs are not the leaf entry 0 committed for it (the answer was changed)"),
        (lambda a: a["summary"].update({"winners": a["summary"]["winners"] + 1}),
         "eod: ALFA's summary and legs are not the leaf entry 0 committed for it (the answer was changed)"),
        (lambda a: a.update({"symbol_proof": None}), "eod: the answer has no proof of ALFA among its symbols"),
        (lambda a: a.update({"legs": a["legs"][1:3]}),
         "eod: the answer holds 2 of ALFA's {legs} legs: save it asked with offset 0 and a limit of at least "
         "total_legs to check them"),
    ],
    ids=["a_leg_edited", "the_summary_edited", "no_proof", "one_page_of_legs"],
)  # fmt: skip
def test_a_changed_or_partial_replay_of_one_symbol_fails(published, change, failure):
    answer = json.loads((published / "replay_alfa.json").read_text())
    legs = answer["total_legs"]
    change(answer)
    (published / "changed.json").write_text(json.dumps(answer))

    code, lines = verify_eod(published, "changed.json")

    assert code == 1
    assert lines[-4].startswith("ok    eod evidence: ")  # the stated hash is still the logged one
    assert lines[-1] == "FAIL  " + failure.format(legs=legs)


def test_a_replay_of_one_symbol_logged_before_per_symbol_roots_is_held_to_its_stated_hash(published, client):
    # An entry and an answer as they were before per-symbol roots: no root in the entry, no proof in the answer.
    older_entry(published, client, without=frozenset({"replay_symbols_root_sha256"}))
    answer = json.loads((published / "replay_alfa.json").read_text())
    del answer["symbol_proof"]
    (published / "older.json").write_text(json.dumps({**answer, "snapshot_sha256": "ab" * 32}))

    code, lines = verify_eod(published, "older.json")

    assert code == 0
    assert lines[-4:] == [
        "ok    eod evidence: the stated calculation_sha256 is the replay_sha256 entry 1 committed for the 2023-02-28 "
        "snapshot",
        "ok    eod as_of: 2023-02-28 is the session entry 1 committed",
        "note  eod: entry 1 commits no per-symbol replay root (logged before them): ALFA's legs are held to the log "
        "by the stated hash only",
        "note  eod: not checked against the log: source, label, symbols, summary, legs, total_legs, last_updated, "
        "disclaimer",
    ]


@pytest.mark.parametrize(
    ("answer", "symbol", "leaf"),
    [("walk_forward_alfa.json", "ALFA", 0), ("walk_forward_chrl.json", "CHRL", 2)],  # CHRL: absent, no rows
)
def test_one_symbols_walk_forward_is_checked_as_a_leaf_of_its_entrys_root(published, answer, symbol, leaf):
    rows = len(json.loads((published / answer).read_text())["rows"])

    code, lines = verify_eod(published, answer)

    assert code == 0
    assert lines[1:] == [
        "ok    entries: all 1 entries hash to the checkpoint's root",
        "ok    eod evidence: the stated calculation_sha256 is the walk_forward_sha256 entry 0 committed for the "
        "2023-02-28 snapshot (every symbol's rows: the answer asked without symbol)",
        "ok    eod as_of and source: 2023-02-28 and synthetic are the session and source entry 0 committed",
        "ok    eod statement: method and inputs_rehashed are what entry 0 committed (walk_forward_statement_sha256)",
        f"ok    eod walk-forward symbol: {symbol}'s components and {rows} rows are leaf {leaf} of the 3-symbol "
        "walk-forward root entry 0 committed",
        NOT_LOGGED,
    ]
    assert rows > 0 if symbol == "ALFA" else rows == 0


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        (lambda a: a["rows"][0].update({"score": a["rows"][0]["score"] + 0.01}),
         "eod: ALFA's components and rows are not the leaf entry 0 committed for it (the answer was changed)"),
        (lambda a: a.update({"rows": a["rows"][1:]}),
         "eod: ALFA's components and rows are not the leaf entry 0 committed for it (the answer was changed)"),
        (lambda a: a["components"]["engine"].update({"version": "9.9.9"}),
         "eod: ALFA's components and rows are not the leaf entry 0 committed for it (the answer was changed)"),
        (lambda a: a.update({"symbol": "BRVO"}),
         "eod: BRVO's components and rows are not the leaf entry 0 committed for it (the answer was changed)"),
        (lambda a: a.update({"symbol_proof": None}), "eod: the answer has no symbol_proof of ALFA's walk-forward rows"),
        (lambda a: a.update({"symbol": None}),
         "eod: the answer's fields do not hash to its calculation_sha256 (the answer was changed, or asked for one "
         "symbol: save the answer for every symbol)"),
    ],
    ids=["a_score_edited", "a_year_dropped", "the_components_edited", "another_symbol", "no_proof", "symbol_removed"],
)  # fmt: skip
def test_a_changed_walk_forward_of_one_symbol_fails(published, change, failure):
    code, lines = verify_eod(published, edited(published, "walk_forward_alfa.json", change))

    assert code == 1
    assert [line for line in lines if line.startswith("FAIL")] == ["FAIL  " + failure]


def test_a_walk_forward_of_one_symbol_logged_before_per_symbol_roots_is_held_to_its_stated_hash(published, client):
    # An entry and an answer as they were before per-symbol walk-forward roots: none in the entry, no proof served.
    older_entry(published, client, without=frozenset({"walk_forward_symbols_root_sha256"}))
    answer = json.loads((published / "walk_forward_alfa.json").read_text())
    (published / "older.json").write_text(json.dumps({**answer, "symbol_proof": None, "snapshot_sha256": "ab" * 32}))

    code, lines = verify_eod(published, "older.json")

    assert code == 0
    assert lines[-4:] == [
        "ok    eod evidence: the stated calculation_sha256 is the walk_forward_sha256 entry 1 committed for the "
        "2023-02-28 snapshot (every symbol's rows: the answer asked without symbol)",
        "ok    eod as_of: 2023-02-28 is the session entry 1 committed",
        "note  eod: entry 1 commits no per-symbol walk-forward root (logged before them): ALFA's components and rows "
        "are held to the log by the stated hash only",
        "note  eod: not checked against the log: source, method, inputs_rehashed, components, rows, last_updated, "
        "disclaimer",
    ]
