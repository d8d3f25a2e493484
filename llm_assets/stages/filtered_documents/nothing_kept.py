"""The refusal of a stage after ``raw_documents`` that kept no document, naming the setting to
look at for the reject reason that took them all."""

from __future__ import annotations

from llm_assets.constants import FILTERED_DOCUMENTS
from llm_assets.kernels.filters.registry import setting_of as filter_setting_of
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
}
"""The setting to look at when a reject reason of a stage before the filters takes every
document; a filter's reasons name theirs (``registry.setting_of``)."""


def _setting_of(reason: str) -> str:
    if reason in _SETTING_OF_REASON:
        return _SETTING_OF_REASON[reason]
    return f"{FILTERED_DOCUMENTS}.config.{filter_setting_of(reason)}"


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
