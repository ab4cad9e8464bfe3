"""`leroy-verify`: check Leroy's publication log offline, one line per check; exit 1 at the first failure.

Sources are URLs (http/https) or files. Pin the log's key with --key; without it the key is fetched from the log
itself, which proves nothing about who runs the log (the output says so).

  leroy-verify --log https://leroy.example --key KEY                  # the latest checkpoint's signature
  leroy-verify --log URL --key KEY --earlier old.checkpoint           # ... and that the log only grew since then
  leroy-verify --log URL --key KEY --entries                          # ... every entry, recomputing the root
  leroy-verify --log URL --key KEY --entry 3                          # ... one entry and its inclusion proof
  leroy-verify --key KEY --answer answer.json --proof proof.json      # an answer proof, fully offline
  leroy-verify --key KEY --checkpoint cp.txt --entries entries.json   # the whole log from files
  leroy-verify --log URL --key KEY --timestamp --tsa-roots roots.pem  # ... and the checkpoint's RFC 3161 token
  leroy-verify --log URL --key KEY --eod heldout.json                 # ... an end-of-day evidence answer as logged
"""

import argparse
import base64
import hashlib
import json
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

import rfc8785

from leroy_verify.merkle import (
    ProofError,
    frontier_append,
    frontier_root,
    leaf_hash,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from leroy_verify.note import Checkpoint, NoteError, Verifier, open_note, parse_checkpoint, parse_verifier_key
from leroy_verify.timestamp import TimestampError, check, load_certificates

PAGE = 1000

# By an end-of-day answer's data_type: the eod_snapshot field committing its calculation_sha256, and the answer's
# fields that hash is taken over. A replay answer, and a walk-forward answer asked for one symbol, show one symbol
# while their hash covers every symbol's, so that hash is compared as stated; one symbol's answer is checked as a leaf
# of the entry's per-symbol root instead.
EOD_BLOCKS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "validation": ("heldout_sha256", ("first", "last", "rows")),
    "walk_forward": ("walk_forward_sha256", ("components", "rows")),
    "historical_replay": ("replay_sha256", None),
}
# The entry field committing the rest of what such an answer states (how its evidence is classed and described;
# a replay's symbols), and those fields. Entries logged before these commit none of them.
EOD_STATEMENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "validation": ("heldout_statement_sha256", ("evidence_class", "reuse_admission")),
    "walk_forward": ("walk_forward_statement_sha256", ("method", "inputs_rehashed")),
    "historical_replay": ("replay_statement_sha256", ("label", "symbols")),
}
# What no entry commits: the snapshot's write time on Leroy's clock, and the fixed notice.
EOD_NEVER_LOGGED = ("last_updated", "disclaimer")


class Failed(Exception):
    pass


def _read_bytes(source: str) -> bytes:
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=20) as response:  # noqa: S310 (http(s) only, checked above)
            return bytes(response.read())
    return Path(source).read_bytes()


def _read(source: str) -> str:
    return _read_bytes(source).decode("utf-8")


class Run:
    def __init__(self, log: str | None) -> None:
        self.log = log.rstrip("/") if log else None

    def url(self, path: str, **params: int) -> str:
        if self.log is None:
            raise Failed(f"needs --log (or a file) to fetch {path}")
        return f"{self.log}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")

    def json(self, path: str, **params: int) -> Any:
        return json.loads(_read(self.url(path, **params)))

    @staticmethod
    def ok(check: str, detail: str) -> None:
        print(f"ok    {check}: {detail}")


def _b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _hashes(values: list[str]) -> list[bytes]:
    return [_b64(v) for v in values]


def _checkpoint(run: Run, label: str, note: str, verifier: Verifier) -> Checkpoint:
    try:
        checkpoint = parse_checkpoint(open_note(note, verifier))
    except NoteError as error:
        raise Failed(f"{label} signature: {error}") from None
    root = base64.b64encode(checkpoint.root).decode()
    # C2SP tlog-checkpoint: the log's key name SHOULD match the origin line (a recommendation, so said, not failed)
    unnamed = "" if checkpoint.origin == verifier.name else ", a key not named for the origin"
    run.ok(f"{label} signature", f"{checkpoint.origin} size {checkpoint.size} root {root} by {verifier.name}{unnamed}")
    return checkpoint


def _entry_leaf(check: str, index: int, entry: dict[str, Any], stated: str | None) -> bytes:
    leaf = leaf_hash(rfc8785.dumps(entry))
    if stated is not None and stated != leaf.hex():
        raise Failed(f"{check}: entry {index}: its leaf_hash is not the hash of its RFC 8785 bytes (it was edited)")
    return leaf


def check_consistency(run: Run, earlier: Checkpoint, later: Checkpoint, proof_file: str | None) -> None:
    # The origin names the log (C2SP tlog-checkpoint): two trees of other logs prove nothing about each other.
    if earlier.origin != later.origin:
        raise Failed(f"consistency: the earlier checkpoint is of log {earlier.origin}, the later of {later.origin}")
    if earlier.size > later.size:
        raise Failed(f"consistency: the earlier checkpoint (size {earlier.size}) is larger than the later one")
    body = (
        json.loads(_read(proof_file))
        if proof_file
        else run.json("/log/proof/consistency", first=earlier.size, second=later.size)
    )
    if (body["first"], body["second"]) != (earlier.size, later.size):
        raise Failed("consistency: the proof is for other tree sizes")
    try:
        verify_consistency(earlier.size, later.size, earlier.root, later.root, _hashes(body["hashes"]))
    except ProofError as error:
        raise Failed(f"consistency: {error} (a forked or rewritten log)") from None
    run.ok("consistency", f"size {earlier.size} is a prefix of size {later.size}: the log only grew")


def check_entries(run: Run, checkpoint: Checkpoint, source: str | None) -> list[dict[str, Any]]:
    if source:
        entries = json.loads(_read(source))["entries"]
    else:
        entries = []
        for start in range(0, checkpoint.size, PAGE):
            entries += run.json("/log/entries", start=start, end=min(start + PAGE, checkpoint.size))["entries"]
    edge: list[bytes] = []
    for position, item in enumerate(entries):
        if item["index"] != position:
            raise Failed(f"entries: index {item['index']} where {position} was due (an entry deleted or reordered)")
        edge = frontier_append(edge, position, _entry_leaf("entries", position, item["entry"], item.get("leaf_hash")))
    if len(entries) != checkpoint.size:
        raise Failed(f"entries: {len(entries)} entries for a checkpoint of size {checkpoint.size}")
    if frontier_root(edge) != checkpoint.root:
        raise Failed("entries: their tree root is not the checkpoint's (an entry edited, deleted or reordered)")
    run.ok("entries", f"all {len(entries)} entries hash to the checkpoint's root")
    return entries


def _sha256(value: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def check_eod(run: Run, entries: list[dict[str, Any]], answer_file: str) -> None:
    """A replay, held-out or walk-forward answer against its snapshot's eod_snapshot entry: its calculation_sha256
    (and the fields it is taken over) is the one committed, its as_of the entry's session, and, where the entry
    commits them, its source, statement and universe summary. A field the entry does not commit is named on a
    `note` line as not checked; nothing is said to be ok that was not compared."""
    answer = json.loads(_read(answer_file))
    data_type = answer.get("data_type")
    if data_type not in EOD_BLOCKS:
        raise Failed(f"eod: data_type {data_type!r} is not replay, held-out or walk-forward evidence")
    field, hashed = EOD_BLOCKS[data_type]
    stated = answer["calculation_sha256"]
    one_walk_forward = data_type == "walk_forward" and answer.get("symbol") is not None
    if one_walk_forward:
        hashed = None  # the hash is the universe answer's: its rows are checked against the per-symbol root below
    if hashed is not None:
        digest = _sha256({name: answer[name] for name in hashed})
        if digest != stated:
            raise Failed("eod: the answer's fields do not hash to its calculation_sha256 (the answer was changed, "
                         "or asked for one symbol: save the answer for every symbol)")  # fmt: skip
        run.ok("eod answer hash", f"{' and '.join(hashed)} hash to {digest}")
    logged = [item for item in entries if item["entry"].get("kind") == "eod_snapshot"
              and item["entry"].get("snapshot_sha256") == answer["snapshot_sha256"]]  # fmt: skip
    if not logged:
        raise Failed("eod: no eod_snapshot entry in the log commits the answer's snapshot_sha256")
    index, entry = logged[0]["index"], logged[0]["entry"]
    if field not in entry:
        raise Failed(f"eod: entry {index} has no {field} (logged before the evidence was committed)")
    if entry[field] != stated:
        raise Failed(f"eod: entry {index} committed another {field} (the evidence was changed after it was logged)")
    if hashed is not None:
        run.ok("eod evidence", f"{' and '.join(hashed)} are what entry {index} committed for the {entry['session']} "
               f"snapshot ({field})")  # fmt: skip
    else:  # the hash covers every symbol's legs or rows, which no one answer holds: only the stated hash was compared
        covers = " (every symbol's rows: the answer asked without symbol)" if one_walk_forward else ""
        run.ok("eod evidence", f"the stated calculation_sha256 is the {field} entry {index} committed for the "
               f"{entry['session']} snapshot{covers}")  # fmt: skip
    unchecked = _check_eod_trust(run, index, entry, answer)
    unchecked += _check_eod_statement(run, index, entry, answer)
    if data_type == "validation":
        if answer["row_count"] != len(answer["rows"]):
            raise Failed(f"eod: row_count {answer['row_count']} is not the number of rows ({len(answer['rows'])}; "
                         "the answer was changed)")  # fmt: skip
        run.ok("eod row count", f"row_count {answer['row_count']} is the number of rows")
    if data_type == "historical_replay":
        if answer["symbol"] is None:
            unchecked += check_replay_universe(run, index, entry, answer)
        else:
            unchecked += check_replay_symbol(run, index, entry, answer)
    if one_walk_forward:
        unchecked += check_walk_forward_symbol(run, index, entry, answer)
    print(f"note  eod: not checked against the log: {', '.join([*unchecked, *EOD_NEVER_LOGGED])}")


def _check_eod_trust(run: Run, index: int, entry: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """as_of against the entry's session; source against the entry's, if it commits one."""
    if answer["as_of"] != entry["session"]:
        raise Failed(f"eod: the answer's as_of {answer['as_of']} is not the session {entry['session']} entry {index} "
                     "committed (the answer was changed)")  # fmt: skip
    if "source" not in entry:
        run.ok("eod as_of", f"{answer['as_of']} is the session entry {index} committed")
        return ["source"]
    if answer["source"] != entry["source"]:
        raise Failed(f"eod: the answer's source {answer['source']!r} is not the source {entry['source']!r} entry "
                     f"{index} committed (the answer was changed)")  # fmt: skip
    run.ok("eod as_of and source", f"{answer['as_of']} and {answer['source']} are the session and source entry "
           f"{index} committed")  # fmt: skip
    return []


def _check_eod_statement(run: Run, index: int, entry: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    field, names = EOD_STATEMENTS[answer["data_type"]]
    if field not in entry:
        return list(names)
    if _sha256({name: answer[name] for name in names}) != entry[field]:
        raise Failed(f"eod: the answer's {' and '.join(names)} are not what entry {index} committed ({field}; the "
                     "answer was changed)")  # fmt: skip
    run.ok("eod statement", f"{' and '.join(names)} are what entry {index} committed ({field})")
    return []


def check_replay_universe(run: Run, index: int, entry: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """The universe replay answer: it holds no symbol's legs, and its summary is the one the entry committed."""
    if answer["legs"] or answer["total_legs"] != 0 or answer["symbol_proof"] is not None:
        raise Failed("eod: an answer without a symbol holds no legs, total_legs or symbol_proof (the answer was "
                     "changed)")  # fmt: skip
    if "replay_summary_sha256" not in entry:
        return ["summary"]
    if _sha256(answer["summary"]) != entry["replay_summary_sha256"]:
        raise Failed(f"eod: the universe summary is not the one entry {index} committed (replay_summary_sha256; the "
                     "answer was changed)")  # fmt: skip
    run.ok("eod replay summary", f"the universe summary is what entry {index} committed (replay_summary_sha256)")
    return []


def check_replay_symbol(run: Run, index: int, entry: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """One symbol's replay answer: its {symbol, summary, legs} is the leaf its proof binds to the per-symbol root
    the entry committed, in a tree over the snapshot's symbols in code-point order."""
    symbol, legs = answer["symbol"], answer["legs"]
    root = entry.get("replay_symbols_root_sha256")
    if root is None:
        print(f"note  eod: entry {index} commits no per-symbol replay root (logged before them): {symbol}'s legs "
              "are held to the log by the stated hash only")  # fmt: skip
        return ["summary", "legs", "total_legs"]
    if len(legs) != answer["total_legs"]:
        raise Failed(f"eod: the answer holds {len(legs)} of {symbol}'s {answer['total_legs']} legs: save it asked "
                     "with offset 0 and a limit of at least total_legs to check them")  # fmt: skip
    symbols = sorted(answer["symbols"])
    if symbol not in symbols or answer.get("symbol_proof") is None:
        raise Failed(f"eod: the answer has no proof of {symbol} among its symbols")
    leaf = leaf_hash(rfc8785.dumps({"symbol": symbol, "summary": answer["summary"], "legs": legs}))
    try:
        verify_inclusion(symbols.index(symbol), len(symbols), leaf, _hashes(answer["symbol_proof"]),
                         bytes.fromhex(root))  # fmt: skip
    except ProofError:
        raise Failed(f"eod: {symbol}'s summary and legs are not the leaf entry {index} committed for it (the answer "
                     "was changed)") from None  # fmt: skip
    run.ok("eod replay symbol", f"{symbol}'s summary and {len(legs)} legs are leaf {symbols.index(symbol)} of the "
           f"{len(symbols)}-symbol replay root entry {index} committed")  # fmt: skip
    return []


def check_walk_forward_symbol(run: Run, index: int, entry: dict[str, Any], answer: dict[str, Any]) -> list[str]:
    """One symbol's walk-forward answer: its {symbol, components, rows} is the leaf its proof binds to the per-symbol
    root the entry committed (a tree over the universe's tickers in code-point order; the proof names its index)."""
    symbol = answer["symbol"]
    root = entry.get("walk_forward_symbols_root_sha256")
    if root is None:
        print(f"note  eod: entry {index} commits no per-symbol walk-forward root (logged before them): {symbol}'s "
              "components and rows are held to the log by the stated hash only")  # fmt: skip
        return ["components", "rows"]
    proof = answer.get("symbol_proof")
    if proof is None:
        raise Failed(f"eod: the answer has no symbol_proof of {symbol}'s walk-forward rows")
    leaf = leaf_hash(rfc8785.dumps({"symbol": symbol, "components": answer["components"], "rows": answer["rows"]}))
    try:
        verify_inclusion(proof["index"], proof["tree_size"], leaf, _hashes(proof["hashes"]), bytes.fromhex(root))
    except ProofError:
        raise Failed(f"eod: {symbol}'s components and rows are not the leaf entry {index} committed for it (the "
                     "answer was changed)") from None  # fmt: skip
    rows, place, size = len(answer["rows"]), proof["index"], proof["tree_size"]
    run.ok("eod walk-forward symbol", f"{symbol}'s components and {rows} rows are leaf {place} of the {size}-symbol "
           f"walk-forward root entry {index} committed")  # fmt: skip
    return []


def check_entry(run: Run, checkpoint: Checkpoint, index: int) -> None:
    item = run.json("/log/entries", start=index, end=index + 1)["entries"][0]
    proof = run.json("/log/proof/inclusion", index=index, tree_size=checkpoint.size)
    try:
        verify_inclusion(index, checkpoint.size, _entry_leaf("inclusion", index, item["entry"], item["leaf_hash"]),
                         _hashes(proof["hashes"]), checkpoint.root)  # fmt: skip
    except ProofError as error:
        raise Failed(f"inclusion: {error}") from None
    run.ok("inclusion", f"entry {index} ({item['entry'].get('kind')}) is in the tree of size {checkpoint.size}")


def check_answer(run: Run, verifier: Verifier, answer_file: str, proof_file: str) -> Checkpoint:
    answer, proof = json.loads(_read(answer_file)), json.loads(_read(proof_file))
    receipt = answer.pop("receipt", None) or {}
    digest = hashlib.sha256(rfc8785.dumps(answer)).hexdigest()
    if digest != proof["answer_sha256"] or receipt.get("answer_sha256", digest) != digest:
        raise Failed("answer: its RFC 8785 hash is not the proof's answer_sha256 (the answer was changed)")
    run.ok("answer hash", digest)
    if proof["status"] != "committed":
        raise Failed(f"answer: not committed yet (day {proof['day']}); ask again after the day's commit")
    day, entry = proof["day_tree"], proof["log_entry"]["entry"]
    try:
        day_root = root_from_inclusion_proof(day["index"], day["size"], leaf_hash(bytes.fromhex(digest)),
                                             _hashes(day["hashes"]))  # fmt: skip
    except ProofError as error:
        raise Failed(f"day tree: {error}") from None
    if (entry.get("kind"), entry.get("root_sha256"), entry.get("answer_count")) != (
        "daily_answers_root",
        day_root.hex(),
        day["size"],
    ):
        raise Failed("day tree: the answer's day root is not the one the log entry commits")
    run.ok("day tree", f"answer {day['index']} of {day['size']} committed on {entry.get('day')}")
    checkpoint = _checkpoint(run, "proof checkpoint", proof["checkpoint"], verifier)
    inclusion = proof["log_inclusion"]
    if inclusion["tree_size"] != checkpoint.size or inclusion["index"] != proof["log_entry"]["index"]:
        raise Failed("log inclusion: the proof is not for that entry in that checkpoint")
    leaf = _entry_leaf("log inclusion", inclusion["index"], entry, proof["log_entry"]["leaf_hash"])
    try:
        verify_inclusion(inclusion["index"], checkpoint.size, leaf, _hashes(inclusion["hashes"]), checkpoint.root)
    except ProofError as error:
        raise Failed(f"log inclusion: {error}") from None
    run.ok("log inclusion", f"day root is entry {inclusion['index']} of the signed tree of size {checkpoint.size}")
    return checkpoint


def check_timestamp(run: Run, checkpoint: Checkpoint, note: str, source: str, roots: str, pinned: str | None) -> None:
    """The RFC 3161 token over the checkpoint note: granted, SHA-256 of exactly these bytes, signed by a TSA
    certificate that chains to `roots` (and is `pinned`, if given)."""
    der = _read_bytes(source or run.url("/log/checkpoint/timestamp", tree_size=checkpoint.size))
    try:
        tsa = load_certificates(_read_bytes(pinned))[0] if pinned else None
        stamp = check(der, note.encode(), nonce=None, roots=load_certificates(_read_bytes(roots)), tsa_certificate=tsa)
    except TimestampError as error:
        raise Failed(f"timestamp: {error}") from None
    when = stamp.gen_time.isoformat().replace("+00:00", "Z")
    run.ok("timestamp", f"size {checkpoint.size} existed no later than {when} (RFC 3161, {stamp.tsa_subject})")


def _key(run: Run, given: str | None) -> Verifier:
    if given is None:
        text = _read(run.url("/.well-known/leroy-log-key"))
        print(f"note  key: taken from the log itself; pin it with --key {text.strip()}")
    elif given.startswith(("http://", "https://")) or Path(given).is_file():
        text = _read(given)
    else:
        text = given
    try:
        return parse_verifier_key(text)
    except NoteError as error:
        raise Failed(f"key: {error}") from None


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="leroy-verify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--log", help="the log's base URL (serving /log/... and /.well-known/leroy-log-key)")
    parser.add_argument("--key", help="verifier key <name>+<hash>+<base64>, or a file or URL holding it")
    parser.add_argument("--checkpoint", help="checkpoint note file or URL (default: the log's latest)")
    parser.add_argument("--earlier", help="an earlier checkpoint you kept: prove the log only grew since")
    parser.add_argument("--consistency", help="consistency proof JSON file (default: fetched from the log)")
    parser.add_argument("--entries", nargs="?", const="", help="audit every entry (from this JSON file or the log)")
    parser.add_argument("--entry", type=int, help="check one entry's inclusion by index")
    parser.add_argument("--answer", help="an answer JSON as received (with its receipt)")
    parser.add_argument("--proof", help="its get_answer_proof result JSON")
    parser.add_argument("--timestamp", nargs="?", const="",
                        help="check the checkpoint's RFC 3161 token (DER TimeStampResp file or URL; default: "
                        "the log's)")  # fmt: skip
    parser.add_argument("--tsa-roots", help="PEM file of the TSA's root (and intermediate) certificates")
    parser.add_argument("--tsa-cert", help="PEM file of the TSA certificate the token must be signed with")
    parser.add_argument("--eod", help="a replay, held-out or walk-forward answer JSON: check it against the log")
    args = parser.parse_args(argv)
    if args.timestamp is not None and args.tsa_roots is None:
        parser.error("--timestamp needs --tsa-roots: a token is only as good as the TSA certificate it chains to")
    if (args.answer is None) != (args.proof is None):
        parser.error("--answer and --proof go together")
    if args.log is None and args.checkpoint is None and args.answer is None:
        parser.error("give --log, --checkpoint or --answer/--proof")
    return args


def main(argv: list[str] | None = None) -> NoReturn:
    args = parse(argv)
    run = Run(args.log)
    try:
        verifier = _key(run, args.key)
        latest, note = None, ""
        if args.answer is not None:
            latest = check_answer(run, verifier, args.answer, args.proof)
            note = json.loads(_read(args.proof))["checkpoint"]
        if args.checkpoint is not None or args.log is not None:
            note = _read(args.checkpoint or run.url("/log/checkpoint"))
            current = _checkpoint(run, "checkpoint", note, verifier)
            if latest is not None and run.log is not None:  # the answer's checkpoint is a prefix of the current
                check_consistency(run, latest, current, None)
            latest = current
        assert latest is not None
        if args.timestamp is not None:
            check_timestamp(run, latest, note, args.timestamp, args.tsa_roots, args.tsa_cert)
        if args.earlier is not None:
            earlier = _checkpoint(run, "earlier checkpoint", _read(args.earlier), verifier)
            check_consistency(run, earlier, latest, args.consistency)
        if args.entries is not None or args.eod is not None:
            entries = check_entries(run, latest, args.entries or None)
            if args.eod is not None:
                check_eod(run, entries, args.eod)
        if args.entry is not None:
            check_entry(run, latest, args.entry)
    except Failed as failure:
        print(f"FAIL  {failure}")
        sys.exit(1)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as error:
        # What the log's operator sent is not trusted: any shape it was not expected to have fails the check.
        print(f"FAIL  input: {type(error).__name__}: {error}")
        sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
