"""Worker-side shared pieces: reading a Parquet file row group by row group."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.stages.shard_io import row_group_batches


def test_row_group_batches_are_the_files_rows_in_order(tmp_path):
    """Read one row group at a time (pyarrow's iter_batches over a whole file holds buffers that
    grow with the file): the same rows, in order, in batches of at most the size asked."""
    table = pa.table({"n": pa.array(range(1000)), "s": pa.array([str(i) for i in range(1000)])})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=300)
    with pq.ParquetFile(tmp_path / "t.parquet") as source:
        batches = list(row_group_batches(source, 128, ["n"]))
    assert max(b.num_rows for b in batches) <= 128
    assert pa.Table.from_batches(batches).column("n").to_pylist() == list(range(1000))
