"""Decontamination, stage side: the eval sets' n-gram index, built with the documents' own
normalization, and its part of the stage config."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from typing import Any

from llm_assets.constants import FILTERED_DOCUMENTS, NORMALIZED_DOCUMENTS, TOKENIZED_DOCUMENTS
from llm_assets.kernels.decontam import DecontamSpec, EvalSetError, eval_index
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.stages.engine import StageContext, StageInputError
from llm_assets.warehouse.shards import file_checksum


def _documents_normalization(ctx: StageContext) -> NormalizeSpec:
    """How the documents ``filtered_documents`` reads were normalized, by their lineage: the
    config recorded with the ``normalized_documents`` shards the current tokenized shards were
    made from (not the latest normalization, which a run of that asset alone may have changed
    since). Without lineage (a catalog that lost it), the latest materialization's config; the
    default preset if there is none. Decontamination normalizes the eval sets alike, PII
    redaction excepted (eval sets are public text)."""
    sources = sorted(
        {
            path
            for shard in ctx.catalog.current_shards(TOKENIZED_DOCUMENTS)
            for path in shard.input_shards
        }
    )
    configs = [
        str(config)
        for (config,) in ctx.catalog.query(
            "SELECT DISTINCT CAST(config AS VARCHAR) FROM shards "
            "WHERE asset = ? AND list_contains(?, path) ORDER BY 1",
            [NORMALIZED_DOCUMENTS, sources],
        )
    ]
    if len(configs) > 1:
        ctx.log.warning(
            f"{FILTERED_DOCUMENTS}: the tokenized documents come from {len(configs)} "
            "normalized_documents configs; decontamination normalizes the eval sets like the "
            "first of them"
        )
    if not configs:
        states = ctx.catalog.materialization_states([NORMALIZED_DOCUMENTS], ctx.run_id)
        if NORMALIZED_DOCUMENTS not in states:
            return NormalizeSpec()
        ours, latest = states[NORMALIZED_DOCUMENTS]
        configs = [(ours or latest).config]
    recorded = json.loads(configs[0])
    default = NormalizeSpec()
    return NormalizeSpec(
        preset=recorded.get("preset", default.preset),
        unicode_form=recorded.get("unicode_form", default.unicode_form),
        strip_html=bool(recorded.get("strip_html", default.strip_html)),
    )


def _decontam(
    ctx: StageContext, spec: DecontamSpec
) -> tuple[DecontamSpec, dict[str, Any], dict[str, Any]]:
    """The decontamination spec with the documents' normalization, built into its n-gram index
    here, before any shard (a bad eval set fails the run, named); its part of the stage config
    (the eval files by name and content, so an edited eval set filters again and a moved one
    does not); and the counts the materialization shows."""
    spec = replace(spec, normalize=_documents_normalization(ctx))
    started = time.time()
    try:
        index = eval_index(spec)
    except EvalSetError as exc:
        raise StageInputError(f"filtered_documents.config.decontaminate: {exc}") from exc
    ctx.log.info(
        f"{FILTERED_DOCUMENTS}: decontaminating against {len(spec.files)} eval file(s): "
        f"{index.records} records, {index.texts} texts, of which {index.checked} have "
        f"{spec.min_ngram}+ words and are checked ({index.short} shorter are not), "
        f"{len(index.hashes)} distinct n-grams of {list(index.lengths)} words; read in "
        f"{time.time() - started:.2f} s"
    )
    config = {
        **asdict(spec),
        "files": [[name, file_checksum(path)] for path, name in spec.files],
    }
    extra = {
        "decontaminate_eval_files": len(spec.files),
        "decontaminate_eval_texts": index.texts,
        "decontaminate_eval_texts_checked": index.checked,
        "decontaminate_eval_ngrams": len(index.hashes),
    }
    return spec, config, extra
