"""File layout under settings.LEROY_DATA_DIR and the byte-level helpers every writer shares."""

import hashlib
import os
import tempfile
from pathlib import Path

import polars as pl
from django.conf import settings

BAR_SCHEMA: dict[str, pl.DataType] = {
    "ts": pl.Datetime("us", "UTC"),
    "open": pl.Float64(),
    "high": pl.Float64(),
    "low": pl.Float64(),
    "close": pl.Float64(),
    "volume": pl.Float64(),
}
BAR_COLUMNS = list(BAR_SCHEMA)


def data_dir() -> Path:
    return Path(settings.LEROY_DATA_DIR)


def absolute(relative: str) -> Path:
    return data_dir() / relative


def unlink_all(relative_paths: list[str]) -> None:
    for relative in relative_paths:
        absolute(relative).unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> str:
    """Write to a temporary file in the same directory, fsync, rename; returns the file's SHA-256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".parquet")
    os.close(fd)
    try:
        # Statistics and compression are fixed so identical frames give identical bytes.
        frame.write_parquet(tmp, compression="zstd", compression_level=3, statistics=True)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return file_sha256(path)


def frame_sha256(frame: pl.DataFrame, header: str) -> str:
    """SHA-256 over a header and each column's raw little-endian values (timestamps as int64 µs)."""
    digest = hashlib.sha256(header.encode())
    digest.update(len(frame).to_bytes(8, "little"))
    for name in frame.columns:
        column = frame.get_column(name)
        if column.dtype == pl.Datetime("us", "UTC"):
            column = column.dt.epoch("us")
        values = column.to_numpy()
        digest.update(name.encode())
        digest.update(values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes())
    return digest.hexdigest()
