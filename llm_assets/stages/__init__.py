"""The pipeline's stages, one module (or package) each: its driver half (plan the shards, skip the
finished ones, run the rest on a compute backend, record them) beside its worker half (one shard),
on a shared engine (:mod:`llm_assets.stages.engine`) that knows no stage.

This is what a Dagster asset calls (and what the benchmarks call, so they measure the assets' own
code). It knows the warehouse and a compute backend, not Dagster."""
