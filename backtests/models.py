"""Strategies (immutable versions), dry-run passes, backtest reports and grid optimizations."""

import uuid

from django.conf import settings
from django.db import models


class Status(models.TextChoices):
    PENDING = "PENDING"
    EXECUTING = "EXECUTING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)


class Strategy(models.Model):
    """One immutable version of an agent-authored strategy; versions of one strategy share a lineage."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="strategies")
    lineage = models.UUIDField(default=uuid.uuid4, db_index=True)
    previous = models.OneToOneField("self", null=True, blank=True, on_delete=models.PROTECT, related_name="next")
    revision = models.PositiveIntegerField(default=1)
    is_current = models.BooleanField(default=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    version = models.CharField(max_length=40, default="1.0.0")
    code = models.TextField()
    code_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "strategies"
        constraints = [
            models.UniqueConstraint(
                fields=["lineage"], condition=models.Q(is_current=True), name="backtests_one_current_version"
            ),
            models.UniqueConstraint(fields=["lineage", "revision"], name="backtests_revision_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} r{self.revision}"


class DryRunPass(models.Model):
    """That this account dry-ran exactly this source successfully (saving a strategy requires one)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "dry run passes"
        constraints = [models.UniqueConstraint(fields=["user", "code_sha256"], name="backtests_dry_run_pass_unique")]


class DryRun(models.Model):
    """One dry run, executed by a worker off the `dryruns` queue; at most one in flight per account."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    code = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    outcome = models.JSONField(null=True, blank=True)  # success, layers, error, result, prints, prints_truncated
    busy = models.BooleanField(default=False)  # cancelled because no worker could take it in time
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user"],
                condition=models.Q(status__in=["PENDING", "EXECUTING"]),
                name="backtests_one_dry_run_in_flight",
            )
        ]


class Report(models.Model):
    """One asynchronous backtest and, once it has run, its report."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reports")
    strategy = models.ForeignKey(Strategy, on_delete=models.PROTECT, related_name="reports")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    data_ids = models.JSONField()  # symbol ids, in data order
    tickers = models.JSONField()
    frequency = models.CharField(max_length=4)
    start_date = models.DateField()
    end_date = models.DateField()
    parameters = models.JSONField(default=dict)  # {name: value}
    simulation = models.JSONField()  # initial_cash, commission, leverage, buy_on_close
    credits_reserved = models.PositiveIntegerField(default=0)
    credits_charged = models.PositiveIntegerField(default=0)
    hold_id = models.BigIntegerField(null=True, blank=True)
    data_version = models.CharField(max_length=64, blank=True, default="")
    report_hash = models.CharField(max_length=64, blank=True, default="")
    statistics = models.JSONField(null=True, blank=True)
    per_symbol = models.JSONField(null=True, blank=True)
    trades = models.JSONField(default=list)
    equity = models.JSONField(default=list)
    diagnostics = models.JSONField(null=True, blank=True)
    lookahead_check = models.JSONField(null=True, blank=True)  # the truncation probe's verdict
    verdict = models.JSONField(null=True, blank=True)  # verdicts.verdict, once COMPLETED; in the report hash
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=[s.value for s in Status if s != Status.CANCELLED]),
                name="backtests_report_status",
            )
        ]


class OptimizationMode(models.TextChoices):
    GRID = "grid"
    WALK_FORWARD = "walk_forward"


class Optimization(models.Model):
    """A 1-2 parameter grid over a saved strategy; each grid point is one `OptimizationRun` (one Celery task).

    A walk-forward optimization runs the grid on each fold's train window (one run per point and fold), then the
    point chosen there on the fold's test window; `walk_forward` holds the folds and, once closed, the result."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="optimizations")
    strategy = models.ForeignKey(Strategy, on_delete=models.PROTECT, related_name="optimizations")
    name = models.CharField(max_length=200)
    mode = models.CharField(max_length=12, choices=OptimizationMode.choices, default=OptimizationMode.GRID)
    walk_forward = models.JSONField(null=True, blank=True)  # periods, anchored, folds; the result once closed
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    data_ids = models.JSONField()
    tickers = models.JSONField()
    frequency = models.CharField(max_length=4)
    start_date = models.DateTimeField()
    end_date = models.DateTimeField()
    grids = models.JSONField()
    parameters = models.JSONField(default=dict)
    simulation_parameters = models.JSONField()
    target_metric = models.CharField(max_length=40)
    target_direction = models.CharField(max_length=8)
    additional_metrics = models.JSONField(default=list)
    use_free_optimization = models.BooleanField(default=False)
    total_iterations = models.PositiveIntegerField()
    completed_iterations = models.PositiveIntegerField(default=0)
    failed_iterations = models.PositiveIntegerField(default=0)
    # The grid's chunk tasks and how many deliveries of them have started (a redelivery counts again): a task takes
    # other tasks' points only once the count reaches the tasks (so no task is left queued with nothing to do, ahead
    # of the probe's queued cuts; after a redelivery one may be, which costs it a few ms, never a point).
    point_tasks = models.PositiveIntegerField(default=0)
    point_tasks_started = models.PositiveIntegerField(default=0)
    credits_per_iteration = models.PositiveIntegerField(default=0)
    credits_probe = models.PositiveIntegerField(default=0)  # the look-ahead probe of the best run
    credits_pbo = models.PositiveIntegerField(default=0)  # CSCV over the grid (refunded when refused)
    pbo_blocks = models.PositiveSmallIntegerField(default=16)
    credits_reserved = models.PositiveIntegerField(default=0)
    credits_charged = models.PositiveIntegerField(default=0)
    hold_id = models.BigIntegerField(null=True, blank=True)
    lookahead_check = models.JSONField(null=True, blank=True)  # the probe of the best run by the target metric
    # {"pbo", "refusal"}: the grid's PBO, computed after the last point while the probe's cuts run; the close's
    # verdict carries it
    grid_pbo = models.JSONField(null=True, blank=True)
    verdict = models.JSONField(null=True, blank=True)  # verdicts.verdict of the best run and the grid, once closed
    report_hash = models.CharField(max_length=64, blank=True, default="")  # over every point's statistics + verdict
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]


class OptimizationRun(models.Model):
    """One grid point of an optimization."""

    optimization = models.ForeignKey(Optimization, on_delete=models.CASCADE, related_name="runs")
    iteration = models.PositiveIntegerField()
    parameters = models.JSONField()  # the swept values at this point
    fold = models.PositiveSmallIntegerField(null=True, blank=True)  # walk-forward: the fold (1-based) it belongs to
    out_of_sample = models.BooleanField(default=False)  # walk-forward: the chosen point on the fold's test window
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # The task that claimed it (its Celery task id): a redelivered task fails what it had claimed and not finished.
    claimed_by = models.CharField(max_length=64, blank=True, default="")
    statistics = models.JSONField(null=True, blank=True)
    returns = models.BinaryField(default=b"")  # series.pack of [[day, return], ...]: the daily series CSCV splits
    # A grid point's returns as CSCV splits them (verdicts.return_blocks): what the grid's PBO reads when they align.
    return_blocks = models.JSONField(null=True, blank=True)
    trade_count = models.PositiveIntegerField(default=0)
    data_version = models.CharField(max_length=64, blank=True, default="")
    # {code_sha256, decisions}: the run's order decisions, so the best run's look-ahead probe compares its cut runs
    # against them instead of rerunning it (only when the code and the bars are the same); null when not kept
    decisions = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["iteration"]
        constraints = [
            models.UniqueConstraint(fields=["optimization", "iteration"], name="backtests_run_iteration_unique")
        ]


class ProbeCut(models.Model):
    """One cut run of an optimization's look-ahead probe (the best run by the target metric, rerun on its bars cut
    at one timestamp): a task of its own, so an optimization's cuts run on as many workers as are free."""

    optimization = models.ForeignKey(Optimization, on_delete=models.CASCADE, related_name="probe_cuts")
    index = models.PositiveSmallIntegerField()  # its place in cut order (0-based)
    until_us = models.BigIntegerField()  # the cut: the bars up to and including this timestamp (µs since epoch)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    outcome = models.JSONField(null=True, blank=True)  # this cut's lookahead_check, once COMPLETED
    error = models.JSONField(null=True, blank=True)  # why its sandbox job gave no check, once FAILED
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["index"]
        constraints = [
            models.UniqueConstraint(fields=["optimization", "index"], name="backtests_probe_cut_index_unique")
        ]


class TrialKind(models.TextChoices):
    BACKTEST = "backtest"
    GRID_POINT = "grid_point"


class Trial(models.Model):
    """One completed backtest or grid point of a strategy: the server's own count of variants tried, which the
    deflated Sharpe ratio deflates by. Counted per account by lineage or by code hash, so neither a new version
    nor a new strategy with the same code starts the count again. Never written from caller input."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    strategy = models.ForeignKey(Strategy, on_delete=models.PROTECT, related_name="trials")
    lineage = models.UUIDField(db_index=True)
    code_sha256 = models.CharField(max_length=64, db_index=True)
    kind = models.CharField(max_length=12, choices=TrialKind.choices)
    report = models.OneToOneField(Report, null=True, blank=True, on_delete=models.CASCADE, related_name="trial")
    run = models.OneToOneField(OptimizationRun, null=True, blank=True, on_delete=models.CASCADE, related_name="trial")
    parameters = models.JSONField()  # every parameter the run used
    data_ids = models.JSONField()
    frequency = models.CharField(max_length=4)
    start = models.DateTimeField()
    end = models.DateTimeField()
    data_version = models.CharField(max_length=64)
    sharpe = models.FloatField(null=True, blank=True)  # per observation (day); null when undefined
    observations = models.PositiveIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(report__isnull=False, run__isnull=True)
                | models.Q(report__isnull=True, run__isnull=False),
                name="backtests_trial_one_source",
            )
        ]
