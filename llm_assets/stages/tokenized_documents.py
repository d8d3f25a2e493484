"""``tokenized_documents``: tokenize every normalized shard; the tokenizer's identity goes in
the footer of every shard from here on."""

from __future__ import annotations

import hashlib

from llm_assets.constants import NORMALIZED_DOCUMENTS, TOKENIZED_DOCUMENTS
from llm_assets.kernels.tokenize.chat_template import chat_template_text
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table
from llm_assets.stages.engine import StageContext, StageReport, _catalog_session, spec_fields
from llm_assets.stages.filtered_documents.nothing_kept import _refuse_nothing_kept
from llm_assets.stages.map_stage import _run_map_stage
from llm_assets.stages.shard_io import TOKENIZER_META


def tokenizer_metadata(spec: TokenizerSpec) -> dict[str, str]:
    """The tokenizer's identity, stored in every shard footer from tokenization onwards."""
    tok = spec.identity()
    return {
        f"{TOKENIZER_META}name": tok.name,
        f"{TOKENIZER_META}engine": tok.engine,
        f"{TOKENIZER_META}fingerprint": tok.fingerprint,
        f"{TOKENIZER_META}vocab_size": str(tok.vocab_size),
        f"{TOKENIZER_META}eos_id": "" if tok.eos_id is None else str(tok.eos_id),
        f"{TOKENIZER_META}pad_id": str(tok.pad_id),
    }


@_catalog_session
def run_tokenized_documents(ctx: StageContext, spec: TokenizerSpec) -> StageReport:
    """Tokenize every normalized shard; the tokenizer's name and fingerprint go in the footer."""
    meta = tokenizer_metadata(spec)
    # The fingerprint of the vocabulary, not only its name, decides whether shards are reused.
    config = {**spec_fields(spec), "tokenizer_fingerprint": meta[f"{TOKENIZER_META}fingerprint"]}
    template = chat_template_text(spec)
    if template is not None:
        # The template's text, not its name: the built-in one may change between releases, and
        # a tokenizer folder's own is read from a file its fingerprint does not cover.
        config["chat_template_sha256"] = hashlib.sha256(template.encode()).hexdigest()
        # 2: the learned tokens end with the template's end of a turn (1: the answer alone).
        # 3: learned_spans (earlier answers of chat_answers: all), and the prompt rendered from
        # the messages as they are (control tokens marked only to check they are not written).
        config["chat_completion"] = 3
    config.pop("threads", None)
    report = _run_map_stage(
        ctx,
        asset=TOKENIZED_DOCUMENTS,
        upstream=NORMALIZED_DOCUMENTS,
        kernel=tokenize_table,
        spec=spec,
        config=config,
        metadata=meta,
    )
    report.extra["tokens"] = int(
        ctx.catalog.query(f"SELECT coalesce(sum(n_tokens), 0) FROM {TOKENIZED_DOCUMENTS}")[0][0]
    )
    report.extra["tokenizer"] = meta[f"{TOKENIZER_META}name"]
    report.extra["tokenizer_fingerprint"] = meta[f"{TOKENIZER_META}fingerprint"]
    _refuse_nothing_kept(ctx, report)
    return report
