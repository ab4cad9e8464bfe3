from django.contrib import admin

from evidence.models import (
    AnswerReceipt,
    BarPartition,
    Corpus,
    EodRow,
    EodSnapshot,
    Frame,
    LiveBar,
    LogCheckpoint,
    LogEntry,
    LogTimestamp,
    MarketMemoryArtifact,
    MarketMemoryBuild,
    ResearchHypothesis,
    Symbol,
)
from leroy.admin import BuildRecordAdmin, ReadOnlyAdmin


@admin.register(Symbol)
class SymbolAdmin(admin.ModelAdmin):
    list_display = ["ticker", "name", "asset_class", "exchange", "currency", "frequencies"]
    search_fields = ["ticker", "name"]


@admin.register(BarPartition)
class BarPartitionAdmin(BuildRecordAdmin):
    list_display = ["symbol", "frequency", "year", "first_ts", "last_ts", "row_count", "source", "sha256"]
    list_filter = ["frequency", "source"]


@admin.register(Corpus)
class CorpusAdmin(admin.ModelAdmin):
    list_display = ["source", "benchmark", "historical_through", "verified_through", "created_at"]


@admin.register(MarketMemoryBuild)
class MarketMemoryBuildAdmin(BuildRecordAdmin):
    list_display = ["pk", "status", "partials_done", "partials_total", "artifact", "created_at"]


@admin.register(MarketMemoryArtifact)
class MarketMemoryArtifactAdmin(BuildRecordAdmin):
    list_display = ["version", "sha256", "is_active", "built_at", "activated_at"]
    # Activation goes through services.market_memory_activate (atomic swap), never an edited flag.


@admin.register(LiveBar)
class LiveBarAdmin(ReadOnlyAdmin):
    list_display = ["symbol", "ts", "close", "volume", "feed", "received_at"]
    list_filter = ["feed"]
    search_fields = ["symbol__ticker"]


@admin.register(Frame)
class FrameAdmin(ReadOnlyAdmin):
    list_display = ["symbol", "source_time", "close", "ready", "regime", "computed_at"]
    search_fields = ["symbol__ticker"]


@admin.register(ResearchHypothesis)
class ResearchHypothesisAdmin(ReadOnlyAdmin):
    list_display = ["user", "symbol", "side", "horizon_minutes", "recorded_at", "reviewed_at"]
    list_filter = ["side", "horizon_minutes"]
    search_fields = ["user__email", "symbol"]


@admin.register(LogEntry)
class LogEntryAdmin(ReadOnlyAdmin):
    list_display = ["index", "kind", "logged_at", "leaf_hash"]
    list_filter = ["kind"]


@admin.register(LogCheckpoint)
class LogCheckpointAdmin(ReadOnlyAdmin):
    list_display = ["tree_size", "root_hash", "created_at"]


@admin.register(LogTimestamp)
class LogTimestampAdmin(ReadOnlyAdmin):
    list_display = ["tree_size", "status", "gen_time", "tsa_subject", "chain_verified", "requested_at"]
    list_filter = ["status"]
    exclude = ["response"]  # DER bytes; served at /log/checkpoint/timestamp


@admin.register(AnswerReceipt)
class AnswerReceiptAdmin(ReadOnlyAdmin):
    list_display = ["answer_id", "tool", "day", "log_index", "recorded_at"]
    list_filter = ["tool"]
    search_fields = ["answer_id", "answer_sha256"]


@admin.register(EodSnapshot)
class EodSnapshotAdmin(ReadOnlyAdmin):
    list_display = ["session", "revision", "log_index", "row_count", "snapshot_sha256", "created_at"]


@admin.register(EodRow)
class EodRowAdmin(ReadOnlyAdmin):
    list_display = ["snapshot", "symbol", "available"]
    list_filter = ["available"]
    search_fields = ["symbol"]
