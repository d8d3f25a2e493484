"""``filtered_documents``: the document filters per shard, then, with deduplication on, the global
dedup step and its per-shard apply; decontamination against eval sets."""
