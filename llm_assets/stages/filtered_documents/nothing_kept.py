"""The refusal of a stage after ``raw_documents`` that kept no document, naming the setting to
look at for the reject reason that took them all."""

from __future__ import annotations

from llm_assets.kernels.decontam import CONTAMINATED
from llm_assets.stages.engine import StageContext, StageInputError, StageReport, _top_reasons


class NothingKeptError(StageInputError):
    """A stage after ``raw_documents`` had documents but kept none (or ``training_batches`` got
    none): training would run zero steps. Raised after the stage's shards and rejects are
    recorded, so the rejects can be queried (``<asset>_rejects``)."""


_SETTING_OF_REASON = {
    "empty_after_normalize": "normalized_documents.config.preset (or strip_html)",
    "pii_density": "normalized_documents.config.pii / pii_max_density",
    "missing_prompt_field": (
        "tokenized_documents.config.prompt_template (the fields it names) or chat_template "
        "(its conversation, in raw_documents.config.chat_field)"
    ),
    "chat_template_error": "tokenized_documents.config.chat_template",
    "special_token_in_chat": "tokenized_documents.config.chat_template (and the tokenizer)",
    "too_few_tokens": "filtered_documents.config.min_tokens",
    "too_many_tokens": "filtered_documents.config.max_tokens",
    CONTAMINATED: "filtered_documents.config.decontaminate (the eval sets, ngram, min_ngram)",
    "wrong_language": "filtered_documents.config.language.languages (or enabled: false)",
    "low_language_score": "filtered_documents.config.language.min_score (or enabled: false)",
    "missing_label": "filtered_documents.config.label_field",
    "unmapped_label": "filtered_documents.config.label_mapping",
    "flagged_words": "filtered_documents.config.flagged_words (or enabled: false)",
    "exact_duplicate": "filtered_documents.config.dedup.exact",
    "near_duplicate": "filtered_documents.config.dedup.near",
}
"""The setting to look at when a reject reason takes every document; the Gopher quality and
repetition reasons are many (``too_few_words``, ``dup_line_ratio``...): their blocks are named
by prefix in :func:`_setting_of`."""


def _setting_of(reason: str) -> str:
    if reason in _SETTING_OF_REASON:
        return _SETTING_OF_REASON[reason]
    if reason.startswith(("dup_", "top_")):
        return "filtered_documents.config.repetition (or enabled: false)"
    return "filtered_documents.config.quality (or enabled: false)"


def _refuse_nothing_kept(ctx: StageContext, report: StageReport) -> None:
    """Raise :class:`NothingKeptError` when documents came in and the stage rejected all of
    them (a language list that excludes the corpus, a prompt template naming fields the rows
    lack, bounds no document meets...), naming the reject counts by reason and the setting of
    the top one (else the run would succeed, with a batches folder of no file)."""
    if report.rows_in == 0 or report.rows_out > 0:
        return
    reasons = report.reject_reasons or {"(unknown)": report.rows_rejected}
    top = max(reasons.items(), key=lambda item: (item[1], item[0]))[0]
    raise NothingKeptError(
        f"{report.asset}: no document kept: all {report.rows_in} document(s) were rejected "
        f"({_top_reasons(reasons, 5)}), so training would run zero steps. Look at "
        f"{_setting_of(top)} ({top}). Every reject is recorded: SELECT source_file, "
        f"source_line, reason, value FROM {report.asset}_rejects (catalog {ctx.catalog.path})."
    )
