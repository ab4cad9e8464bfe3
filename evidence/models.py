"""Market data (symbols, bar partitions) and Market Memory artifacts: the files hold the data, rows index them."""

from typing import Any

from django.db import models
from django.db.models.functions import Upper

from evidence.vocabulary import ASSET_CLASSES, FREQUENCIES, HORIZONS, SIDES, SOURCES


class Symbol(models.Model):
    ticker = models.CharField(max_length=20, unique=True)
    name = models.CharField(max_length=200, blank=True, default="")
    asset_class = models.CharField(max_length=10, choices=[(c, c) for c in ASSET_CLASSES], default="equity")
    exchange = models.CharField(max_length=20, blank=True, default="")
    currency = models.CharField(max_length=10, default="USD")
    frequencies = models.JSONField(default=list)  # frequencies with stored bars, e.g. ["1d", "1m"]

    class Meta:
        ordering = ["ticker"]
        constraints = [
            models.CheckConstraint(condition=models.Q(ticker=Upper("ticker")), name="evidence_symbol_ticker_upper"),
            models.CheckConstraint(
                condition=models.Q(asset_class__in=ASSET_CLASSES), name="evidence_symbol_asset_class"
            ),
        ]

    def __str__(self) -> str:
        return self.ticker


class BarPartition(models.Model):
    """One immutable Parquet file of bars: one symbol, one frequency, one calendar year (UTC)."""

    symbol = models.ForeignKey(Symbol, on_delete=models.CASCADE, related_name="partitions")
    frequency = models.CharField(max_length=4, choices=[(f, f) for f in FREQUENCIES])
    year = models.PositiveSmallIntegerField()
    first_ts = models.DateTimeField()
    last_ts = models.DateTimeField()
    row_count = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)  # of the file's bytes
    path = models.CharField(max_length=300)  # relative to settings.LEROY_DATA_DIR
    source = models.CharField(max_length=10, choices=[(s, s) for s in SOURCES], default="vendor")
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["symbol_id", "frequency", "year"]
        constraints = [
            models.UniqueConstraint(fields=["symbol", "frequency", "year"], name="evidence_partition_unique"),
            models.CheckConstraint(condition=models.Q(frequency__in=FREQUENCIES), name="evidence_partition_frequency"),
            models.CheckConstraint(
                condition=models.Q(first_ts__lte=models.F("last_ts")), name="evidence_partition_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.symbol_id}/{self.frequency}/{self.year}"


class Corpus(models.Model):
    """What a Market Memory build covers: the benchmark, the historical boundary and the forward-overlay universe.

    The newest row is the one builds use. `source` is "synthetic" for generated demo data so it can never pass as real.
    """

    source = models.CharField(max_length=10, choices=[(s, s) for s in SOURCES])
    benchmark = models.ForeignKey(Symbol, on_delete=models.PROTECT, related_name="+")
    historical_through = models.DateField()  # last session of the historical contract; later sessions are overlay
    # Last verified (closed and compacted) session; later bars are provisional and never enter Market Memory.
    verified_through = models.DateField(null=True, blank=True)
    overlay_tickers = models.JSONField(default=list)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "corpora"
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.source} through {self.historical_through}"


class MarketMemoryBuild(models.Model):
    """One run of the build: a map task per symbol, then a reduce once every partial is in."""

    STATUSES = ("running", "done", "failed")
    status = models.CharField(max_length=10, choices=[(s, s) for s in STATUSES], default="running")
    params = models.JSONField()  # through, historical_through, benchmark, tickers, input hashes
    partials_total = models.PositiveIntegerField()
    partials_done = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    artifact = models.ForeignKey("MarketMemoryArtifact", null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"build {self.pk} ({self.status})"


class MarketMemoryArtifact(models.Model):
    """An immutable artifact directory; sha256 is SHA-256 of its manifest.json bytes. At most one is active."""

    sha256 = models.CharField(max_length=64, unique=True)
    version = models.CharField(max_length=80)
    path = models.CharField(max_length=300)  # relative to settings.LEROY_DATA_DIR
    manifest = models.JSONField()
    built_at = models.DateTimeField()  # wall clock; kept out of the manifest so rebuilds are byte-identical
    is_active = models.BooleanField(default=False)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-built_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_active"], condition=models.Q(is_active=True), name="evidence_one_active_artifact"
            )
        ]

    def __str__(self) -> str:
        return f"{self.version} ({self.sha256[:12]})"


class LiveBar(models.Model):
    """A provisional minute bar of the open session as the frame feed received it; never part of Market Memory."""

    FEEDS = ("provider", "replay")
    symbol = models.ForeignKey(Symbol, on_delete=models.CASCADE, related_name="live_bars")
    ts = models.DateTimeField()  # the minute the bar opened
    open = models.FloatField()
    high = models.FloatField()
    low = models.FloatField()
    close = models.FloatField()
    volume = models.FloatField()
    feed = models.CharField(max_length=10, choices=[(f, f) for f in FEEDS])
    received_at = models.DateTimeField()

    class Meta:
        ordering = ["symbol_id", "ts"]
        constraints = [
            models.UniqueConstraint(fields=["symbol", "ts"], name="evidence_livebar_unique"),
            models.CheckConstraint(condition=models.Q(volume__gte=0), name="evidence_livebar_volume"),
        ]

    def __str__(self) -> str:
        return f"{self.symbol_id}@{self.ts.isoformat()}"


class Frame(models.Model):
    """The current verified market frame of a symbol, as the feed last computed it; what requests read."""

    symbol = models.OneToOneField(Symbol, on_delete=models.CASCADE, related_name="frame")
    source_time = models.DateTimeField()  # the minute the frame's bar opened; known one minute later
    session = models.DateField()
    open = models.FloatField()
    high = models.FloatField()
    low = models.FloatField()
    close = models.FloatField()
    volume = models.FloatField()
    is_fill = models.BooleanField()  # no trade printed in that minute
    ready = models.BooleanField()  # every point-in-time warm-up complete
    buy_mask = models.BigIntegerField(null=True)
    sell_mask = models.BigIntegerField(null=True)
    regime = models.SmallIntegerField(null=True)
    trend = models.SmallIntegerField(null=True)
    volatility = models.SmallIntegerField(null=True)
    tod = models.SmallIntegerField(null=True)
    features = models.JSONField()
    computed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.symbol_id}@{self.source_time.isoformat()}"


class ResearchHypothesis(models.Model):
    """A research note in a user's own journal; the review compares it with verified bars, never places an order."""

    user = models.ForeignKey("accounts.User", on_delete=models.CASCADE, related_name="research_hypotheses")
    # Its number in its account's journal (1, 2, ...): the hypothesis_id agents see. The table's own id counts every
    # account's notes, so showing it told each agent how many notes the others had written.
    number = models.PositiveIntegerField()
    symbol = models.CharField(max_length=20)
    side = models.CharField(max_length=4, choices=[(s, s) for s in SIDES])
    horizon_minutes = models.PositiveSmallIntegerField(choices=[(h, h) for h in HORIZONS])
    note = models.TextField()
    recorded_at = models.DateTimeField()
    decision_time = models.DateTimeField(null=True)  # the last regular-session minute closed at recorded_at
    client_request_id = models.CharField(max_length=100, null=True, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.JSONField(null=True, blank=True)  # the latest review, as returned

    class Meta:
        ordering = ["user_id", "pk"]
        verbose_name_plural = "research hypotheses"
        constraints = [
            models.UniqueConstraint(fields=["user", "number"], name="evidence_hypothesis_number_unique"),
            models.UniqueConstraint(
                fields=["user", "client_request_id"],
                condition=models.Q(client_request_id__isnull=False),
                name="evidence_hypothesis_request_unique",
            ),
            models.CheckConstraint(condition=models.Q(side__in=SIDES), name="evidence_hypothesis_side"),
            models.CheckConstraint(
                condition=models.Q(horizon_minutes__in=HORIZONS), name="evidence_hypothesis_horizon"
            ),
        ]

    def __str__(self) -> str:
        return f"hypothesis {self.number} {self.side} {self.symbol}"


# --- the publication log (evidence.publication) ---------------------------------------------------------------

# Entry kinds and the fields each one must carry (besides `kind` and `logged_at`).
LOG_KINDS: dict[str, tuple[str, ...]] = {
    "market_memory_artifact": ("artifact_version", "artifact_sha256", "sessions_through"),
    "forward_overlay": ("artifact_sha256", "overlay_sha256", "sessions_through"),
    "eod_snapshot": ("session", "snapshot_sha256", "row_count"),
    "daily_answers_root": ("day", "answer_count", "root_sha256"),
}


class AppendOnly(Exception):
    """The publication log's rows are never updated or deleted (PostgreSQL's trigger says the same to raw SQL)."""


class AppendOnlyQuerySet[M: models.Model](models.QuerySet[M]):
    def update(self, **kwargs: object) -> int:
        raise AppendOnly("the publication log is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("the publication log is append-only")


class AppendOnlyModel(models.Model):
    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("the publication log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnly("the publication log is append-only")


class LogEntry(AppendOnlyModel):
    """Leaf `index` of the RFC 9162 tree: `body` is the entry's RFC 8785 JSON, the exact leaf input."""

    index = models.PositiveBigIntegerField(primary_key=True)
    kind = models.CharField(max_length=32, choices=[(k, k) for k in LOG_KINDS])
    body = models.TextField()
    leaf_hash = models.CharField(max_length=64)  # hex SHA-256(0x00 ‖ body)
    logged_at = models.DateTimeField()

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "log entries"
        ordering = ["index"]
        indexes = [models.Index(fields=["kind", "index"])]

    def __str__(self) -> str:
        return f"log[{self.index}] {self.kind}"


class LogCheckpoint(AppendOnlyModel):
    """The signed checkpoint written after each append batch, with the tree's right edge (the roots of its perfect
    subtrees, largest first) so the next append costs O(log n) hashes."""

    tree_size = models.PositiveBigIntegerField(unique=True)
    root_hash = models.CharField(max_length=64)  # hex
    frontier = models.JSONField()  # hex hashes
    note = models.TextField()  # the C2SP signed note, as served at /log/checkpoint
    created_at = models.DateTimeField()

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-tree_size"]

    def __str__(self) -> str:
        return f"checkpoint {self.tree_size}"


class LogTimestamp(AppendOnlyModel):
    """One RFC 3161 time-stamp request for a checkpoint (LEROY_LOG_TSA_URL): the TSA's DER TimeStampResp over the
    checkpoint note's bytes when granted and checked, else why not. A failure is recorded, never retried in place:
    a later attempt is a new row, and the checkpoint is published either way."""

    tree_size = models.PositiveBigIntegerField()  # of the LogCheckpoint whose note was stamped
    tsa_url = models.CharField(max_length=500)
    status = models.CharField(max_length=8, choices=[("granted", "granted"), ("failed", "failed")])
    response = models.BinaryField(null=True)  # DER TimeStampResp, as served at /log/checkpoint/timestamp
    gen_time = models.DateTimeField(null=True)  # the TSA's genTime
    tsa_subject = models.CharField(max_length=500, blank=True)  # RFC 4514 subject of the signing certificate
    chain_verified = models.BooleanField(default=False)  # signature and chain checked against LEROY_LOG_TSA_ROOTS
    detail = models.CharField(max_length=500, blank=True)  # why it failed
    requested_at = models.DateTimeField()

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-tree_size", "-pk"]
        indexes = [models.Index(fields=["tree_size", "status"])]

    def __str__(self) -> str:
        return f"timestamp {self.tree_size} {self.status}"


class AnswerReceipt(models.Model):
    """The hash of one metered answer, committed with its day's other hashes into a `daily_answers_root` entry.

    Only the hash is kept (never the answer); the owner is kept so only they can ask for its proof. `log_index` is
    set once, when the hash is committed."""

    user = models.ForeignKey("accounts.User", null=True, on_delete=models.SET_NULL, related_name="+")
    answer_id = models.CharField(max_length=64, unique=True)
    tool = models.CharField(max_length=64)
    answer_sha256 = models.CharField(max_length=64)
    day = models.DateField()  # UTC day of the answer
    recorded_at = models.DateTimeField()
    log_index = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["pk"]
        indexes = [models.Index(fields=["day", "log_index"]), models.Index(fields=["log_index"])]

    def __str__(self) -> str:
        return f"{self.answer_id} ({self.tool})"


# --- the end-of-day evidence layer (evidence.eod) ---------------------------------------------------------------


class EodSnapshot(AppendOnlyModel):
    """One completed end-of-day run for a session: never changed; a re-run with other inputs is a new revision.

    `snapshot_sha256` is SHA-256 of the RFC 8785 JSON of {session, revision, components, rows}; `log_index` is
    the eod_snapshot log entry committing it, and doubles as the stable publication id."""

    session = models.DateField()
    revision = models.PositiveSmallIntegerField()
    snapshot_sha256 = models.CharField(max_length=64, unique=True)
    row_count = models.PositiveIntegerField()
    components = models.JSONField()  # universe, engine, variant set, data and calculation hashes and versions
    replay = models.JSONField()  # universe summary, sha256
    heldout = models.JSONField()  # rows, class, sha256
    walk_forward = models.JSONField()  # rows per symbol and year, sha256
    changes = models.JSONField()  # [{symbol, field, before, after}] against the previous snapshot
    log_index = models.PositiveBigIntegerField(unique=True)
    created_at = models.DateTimeField()

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["session", "revision"]
        constraints = [models.UniqueConstraint(fields=["session", "revision"], name="evidence_eod_snapshot_revision")]

    def __str__(self) -> str:
        return f"eod {self.session} r{self.revision}"


class EodRow(AppendOnlyModel):
    """One symbol of a snapshot exactly as frozen (`row`, the dict hashed into the snapshot), and its replay."""

    snapshot = models.ForeignKey(EodSnapshot, on_delete=models.PROTECT, related_name="rows")
    symbol = models.CharField(max_length=20)
    available = models.BooleanField()  # False: absent from this snapshot (no verified bar for its session)
    row = models.JSONField()
    replay = models.JSONField(null=True)  # {summary, legs}; null when absent

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["snapshot_id", "symbol"]
        constraints = [models.UniqueConstraint(fields=["snapshot", "symbol"], name="evidence_eod_row_unique")]

    def __str__(self) -> str:
        return f"{self.snapshot_id}/{self.symbol}"
