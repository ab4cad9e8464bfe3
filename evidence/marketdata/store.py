"""The storage layer under settings.LEROY_DATA_DIR: a local path or any fsspec URL (s3://, gs://, memory://, file://).

Every caller names files by their path relative to the data directory and goes through these functions. Files that
readers share are content-addressed, so a name is written once with its final bytes: locally through a temporary
file and a rename, on an object store as one whole-object put (there is no rename there). The DB row that names a
file is the commit point; a file no row names is never read.
"""

import hashlib
import io
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import polars as pl
from django.conf import settings
from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

BAR_SCHEMA: dict[str, pl.DataType] = {
    "ts": pl.Datetime("us", "UTC"),
    "open": pl.Float64(),
    "high": pl.Float64(),
    "low": pl.Float64(),
    "close": pl.Float64(),
    "volume": pl.Float64(),
}
BAR_COLUMNS = list(BAR_SCHEMA)


@lru_cache(maxsize=8)
def _filesystem(location: str) -> tuple[AbstractFileSystem, str]:
    return url_to_fs(location)


def _fs() -> tuple[AbstractFileSystem, str]:
    return _filesystem(str(settings.LEROY_DATA_DIR))


def local_root() -> Path | None:
    """The data directory as a local path, or None when it lives on a remote filesystem."""
    fs, root = _fs()
    return Path(root) if isinstance(fs, LocalFileSystem) else None


def _path(relative: str) -> str:
    return f"{_fs()[1].rstrip('/')}/{relative}"


def url(relative: str) -> str:
    """Where a stored file lives, for operators: a local path, or the URL on the remote filesystem."""
    root = local_root()
    return str(root / relative) if root is not None else f"{str(settings.LEROY_DATA_DIR).rstrip('/')}/{relative}"


def exists(relative: str) -> bool:
    fs, _ = _fs()
    return fs.exists(_path(relative))


def read_bytes(relative: str) -> bytes:
    fs, _ = _fs()
    return fs.cat_file(_path(relative))


def stamp(relative: str) -> tuple[str, int, int, int] | None:
    """A local stored file's (path, inode, size, modification ns): every write replaces the file (a new inode), so
    equal stamps are equal bytes to a reader that keeps what it read. None when the file is gone or the root is
    remote (where a reader reads again)."""
    root = local_root()
    if root is None:
        return None
    path = root / relative
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return str(path), status.st_ino, status.st_size, status.st_mtime_ns


def scan_parquet(relatives: list[str]) -> pl.LazyFrame:
    """Stored Parquet files as one lazy frame (local files are scanned in place, remote ones fetched whole)."""
    root = local_root()
    if root is not None:
        return pl.scan_parquet([root / relative for relative in relatives])
    return pl.scan_parquet([read_bytes(relative) for relative in relatives])


def parquet_bytes(frame: pl.DataFrame) -> bytes:
    """Statistics, compression and the layout are fixed so equal frames give identical bytes: the writer's pages follow
    the frame's chunks, which depend on how it was computed (threads, concats), so it is written as one chunk."""
    buffer = io.BytesIO()
    frame.rechunk().write_parquet(buffer, compression="zstd", compression_level=3, statistics=True)
    return buffer.getvalue()


def write_file(path: Path, data: bytes) -> None:
    """Write a local file atomically (temporary file in the same directory, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(relative: str, data: bytes) -> None:
    """Store a file whole under its final name (a reader never sees part of it). Callers that name a file by its
    hash hash its bytes themselves: most writes need none (0.2 s of a build's CPU went to unread hashes)."""
    root = local_root()
    if root is not None:
        write_file(root / relative, data)
        return
    fs, _ = _fs()
    fs.pipe_file(_path(relative), data)


def write_parquet(frame: pl.DataFrame, relative: str) -> None:
    write_bytes(relative, parquet_bytes(frame))


def write_scratch(frame: pl.DataFrame, relative: str) -> None:
    """A build's scratch frame (a partial, read once by its reduce and then deleted): Arrow IPC with lz4, cheaper to
    write and read than Parquet (no page encoding, no statistics) and still a few times smaller than raw."""
    buffer = io.BytesIO()
    frame.write_ipc(buffer, compression="lz4")
    write_bytes(relative, buffer.getvalue())


def read_scratch(relative: str) -> pl.DataFrame:
    root = local_root()
    if root is not None:
        return pl.read_ipc(root / relative)
    return pl.read_ipc(io.BytesIO(read_bytes(relative)))


def remove(relatives: list[str]) -> None:
    """Delete stored files; a file already gone is not an error."""
    fs, _ = _fs()
    for relative in relatives:
        if fs.exists(_path(relative)):
            fs.rm_file(_path(relative))


def remove_tree(relative: str) -> None:
    fs, _ = _fs()
    if fs.exists(_path(relative)):
        fs.rm(_path(relative), recursive=True)


def staging_dir(relative: str) -> Path:
    """An empty local directory for files published together (see publish_dir): inside the data directory when it
    is local, so publishing is one rename; else under LEROY_VAR_DIR."""
    root = local_root()
    staging = (root if root is not None else Path(settings.LEROY_VAR_DIR) / "staging") / relative
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def publish_dir(staging: Path, relative: str, *, marker: str) -> None:
    """Move a staged directory to its content-addressed name, unless that name already holds it.

    Locally the directory is renamed into place. Remotely each file is put whole and `marker` last, so a directory
    whose marker exists is complete.
    """
    root = local_root()
    if root is not None:
        final = root / relative
        if final.exists():
            shutil.rmtree(staging)  # identical inputs already produced these files
        else:
            final.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(final)
        return
    fs, _ = _fs()
    if not fs.exists(_path(f"{relative}/{marker}")):
        names = sorted(p.name for p in staging.iterdir() if p.name != marker)
        for name in [*names, marker]:
            fs.put_file(str(staging / name), _path(f"{relative}/{name}"))
    shutil.rmtree(staging)


def fetch_file(relative: str, path: Path) -> None:
    """Copy a stored file to a local path."""
    fs, _ = _fs()
    path.parent.mkdir(parents=True, exist_ok=True)
    fs.get_file(_path(relative), str(path))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
