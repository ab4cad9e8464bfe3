"""The public end-of-day evidence layer: one versioned trend engine over daily bars of a fixed universe, its
five-year replay, the held-out tail, the rolling walk-forward and the daily snapshots committed to the publication
log. It reads bars only through evidence.marketdata and is computed by `eod_run`, never on request."""
