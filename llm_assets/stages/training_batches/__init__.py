"""``training_batches``: a global shuffle with bounded memory (scatter to hash buckets, gather and
sort each bucket), packed or padded into Parquet batch files, optionally balanced, mixed,
augmented and exported for Megatron-LM."""
