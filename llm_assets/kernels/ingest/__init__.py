"""Ingest kernel: read one input file into document batches and a record of what was dropped.

Pure (no Dagster, no module state): :func:`~llm_assets.kernels.ingest.read.read_documents`
streams a JSONL (plain, gzip, zstd; ``.jsonl`` or ``.json``), Parquet, CSV or TXT file and yields
a :class:`StageResult` every ``batch_rows`` records or ``batch_bytes`` bytes of input, through the
reader of its format (one module each). Text files are UTF-8, or UTF-16 or UTF-32 with a
byte-order mark (transcoded to UTF-8 as read:
:func:`~llm_assets.kernels.ingest.formats.unicode_encoding`). Bad input never raises: every record
read is either kept or rejected exactly once, with one of the reasons of
:mod:`~llm_assets.kernels.ingest.records`, so the rows of a run always reconcile. Only a file that
cannot be opened at all (missing, permission denied) raises :class:`OSError`.
"""
