"""Stored files: equal frames give identical bytes, however the frame was assembled."""

import polars as pl

from evidence.marketdata import store


def test_parquet_bytes_do_not_depend_on_how_the_frame_is_chunked() -> None:
    rows = 300_000  # past one page, where the writer's page boundaries followed the frame's chunks
    whole = pl.DataFrame(
        {"n": range(rows), "label": [f"k{i % 7}" for i in range(rows)], "x": [i * 0.5 for i in range(rows)]}
    )
    pieces = pl.concat([whole[:1_000], whole[1_000:150_000], whole[150_000:]], rechunk=False)

    assert pieces.n_chunks() == 3
    assert pieces.equals(whole)
    assert store.parquet_bytes(pieces) == store.parquet_bytes(whole)
