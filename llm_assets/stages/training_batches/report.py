"""What ``training_batches`` reports after the gather: classes, mixture, augment, lost tokens."""

from __future__ import annotations

from collections import Counter

from llm_assets import storage
from llm_assets.constants import TRAINING_BATCHES
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.mixture import MixtureSpec
from llm_assets.kernels.schema import LABEL
from llm_assets.stages.engine import StageContext, StageReport
from llm_assets.stages.training_batches.gather import MIXTURE_DOCUMENTS, MIXTURE_TOKENS
from llm_assets.stages.training_batches.scatter import SPLITS, label_counts

AUGMENT_UNCHANGED_WARNING = 0.5
"""Share of the variants left as their document (too few words for their edit) above which
``augment`` logs a WARNING: text without spaces between words (Chinese, Japanese) is one word."""


def _log_augment(ctx: StageContext, report: StageReport, spec: BatchSpec) -> None:
    """``augment``: how many variants each edit made, logged; a WARNING when most copies could
    not be varied (:data:`AUGMENT_UNCHANGED_WARNING`)."""
    if spec.augment == "none":
        return
    made = int(report.extra.get("augmented", 0))
    edits = {
        key.removeprefix("augmented_"): int(value)
        for key, value in sorted(report.extra.items())
        if key.startswith("augmented_")
    }
    ctx.log.info(
        f"{TRAINING_BATCHES}: augment {spec.augment}: {made:,} train rows are variants of their "
        "documents"
        + (" (" + ", ".join(f"{edit} {n:,}" for edit, n in edits.items()) + ")" if edits else "")
    )
    unchanged = edits.get("unchanged", 0)
    if made and unchanged > AUGMENT_UNCHANGED_WARNING * made:
        ctx.log.warning(
            f"{TRAINING_BATCHES}: augment {spec.augment}: {unchanged:,} of the {made:,} copies "
            "are their documents unchanged: too few words to edit (a word is a run of "
            "non-space characters, so text without spaces between words is one word)"
        )


def _report_mixture(ctx: StageContext, report: StageReport, mixture: MixtureSpec) -> None:
    """The documents and tokens of each source in the train batch files (copies counted, before
    the layout cuts or pads), from their footers' statistics (so a reused folder reports them
    too), as ``mixture`` in the report, logged beside the shares the weights ask for."""
    held: dict[str, dict[str, int]] = {
        s.name: {"documents": 0, "tokens": 0} for s in mixture.sources
    }
    for key in list(report.extra):
        for prefix, count in ((MIXTURE_DOCUMENTS, "documents"), (MIXTURE_TOKENS, "tokens")):
            if key.startswith(prefix):
                name = key.removeprefix(prefix)
                held.setdefault(name, {"documents": 0, "tokens": 0})[count] = int(
                    report.extra.pop(key)
                )
    totals = {f: sum(h[f] for h in held.values()) or 1 for f in ("documents", "tokens")}
    shares = mixture.shares
    report.extra["mixture"] = {
        name: {
            "share": round(shares.get(name, 0.0), 6),
            "documents": h["documents"],
            "tokens": h["tokens"],
            "document_share": round(h["documents"] / totals["documents"], 6),
            "token_share": round(h["tokens"] / totals["tokens"], 6),
        }
        for name, h in held.items()
    }
    unit = "token_share" if mixture.by == "tokens" else "document_share"
    ctx.log.info(
        f"{TRAINING_BATCHES}: the train split's mixture by {mixture.by}: "
        + ", ".join(
            f"{name!r} {m[unit]:.1%} (share {m['share']:.1%}; {m['documents']:,} documents, "
            f"{m['tokens']:,} tokens)"
            for name, m in report.extra["mixture"].items()
        )
    )


def _label_documents(report: StageReport) -> dict[str, dict[str, int]]:
    """Documents per class label of each split in the batch files (copies counted): read from
    their ``label`` column, so a folder reused as it is reports them too."""
    totals: dict[str, Counter[str]] = {split: Counter() for split in SPLITS}
    for shard in report.shards:
        if not storage.exists(shard.path):
            continue
        column = storage.read_parquet(shard.path, columns=[LABEL])[LABEL]
        totals[shard.shard.rsplit("-", 1)[0]].update(label_counts(column))
    return {split: dict(sorted(c.items())) for split, c in totals.items()}


LOST_TOKENS_WARNING = 0.10
"""Share of the documents' tokens cut off (``truncated_tokens``) or dropped (``dropped_tokens``)
by the batches' layout above which ``training_batches`` logs a WARNING."""


def _warn_lost_tokens(ctx: StageContext, report: StageReport, spec: BatchSpec) -> None:
    """A WARNING when the layout left out more than :data:`LOST_TOKENS_WARNING` of the tokens
    it was given: documents cut to ``seq_len`` (layouts ``padded`` and ``bucketed``, and
    ``packed`` with ``overflow: truncate``), or the last partial blocks dropped
    (``drop_remainder``). The counts are in the metadata too, where nobody looks."""
    tokens = int(report.extra.get("tokens", 0))
    truncated = int(report.extra.get("truncated_tokens", 0))
    dropped = int(report.extra.get("dropped_tokens", 0))
    given = tokens + truncated + dropped
    report.extra["truncated_fraction"] = truncated / given if given else 0.0
    if given and truncated > LOST_TOKENS_WARNING * given:
        if spec.layout == "packed":
            why = f"overflow 'truncate' cuts every document to seq_len - 1 ({spec.seq_len - 1})"
            keep = "Overflow 'split' keeps them (a long document continues in the next block)"
        else:
            why = f"layout {spec.layout!r} keeps at most seq_len ({spec.seq_len}) of a document"
            keep = "Layout 'packed' keeps them (a long document continues in the next block)"
        ctx.log.warning(
            f"{TRAINING_BATCHES}: {truncated:,} of the documents' {given:,} tokens "
            f"({truncated / given:.0%}) were cut off and are not in the batches: {why}. "
            f"{keep}, or raise seq_len (see the length_histogram metadata)"
        )
    if given and dropped > LOST_TOKENS_WARNING * given:
        ctx.log.warning(
            f"{TRAINING_BATCHES}: {dropped:,} of the documents' {given:,} tokens "
            f"({dropped / given:.0%}) were dropped with drop_remainder (the last partial block "
            "of each file): set drop_remainder to false to keep them, or lower shuffle_buckets"
        )
