"""Training batches: seeded shuffle, train/validation split, and packed or padded sequences.

The batching stage runs in two phases over many shards, and this package holds the pure functions
of both (no Dagster, no file I/O):

1. scatter, per input shard: :func:`shuffle_keys`, :func:`assign_splits` and
   :func:`assign_buckets` give each document its split and shuffle bucket;
2. gather, per (split, bucket): :func:`shuffle_order` sorts the bucket's documents by shuffle key,
   then :func:`pack_sequences` or :func:`pad_sequences` builds the sequences.

Every decision about a document depends only on the seed and its ``doc_id`` (keyed hashes), never
on which shard it came in or where in that shard, so the output is byte-identical whatever the
number or order of input shards. Buckets are contiguous ranges of the key space, so the buckets in
order, each sorted by key, are the whole corpus sorted by key: the global shuffle is exact, and the
memory of one gather is bounded by one bucket.

Sequences are Arrow ``list<...>`` columns built from one flat numpy buffer and int32 offsets (no
Python object per token); every row of a column has the same length. ``list`` rather than
``fixed_size_list`` because it is what every Parquet reader (DuckDB, Polars, Hugging Face
``datasets``) maps to a plain sequence.
"""
