"""The Markdown summary an asset's metadata opens with: its key facts, formatted for people.

Dagster shows a Markdown value inline only while it is under 1,000 characters (longer ones open
in a dialog), so a summary drops its least important lines until it fits (:func:`fit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_assets.assets.reporting.markdown import (
    code_span,
    count,
    duration,
    facts_list,
    percent,
    rate,
    top_reasons,
)
from llm_assets.stages.engine import StageReport
from llm_assets.storage import is_remote, location_path

INLINE_LIMIT = 999
"""The longest Markdown the UI's metadata table shows inline (it opens 1,000 characters and more
in a dialog behind a "[Show Markdown]" link)."""


@dataclass
class LengthStats:
    """Tokens per document, summed shard by shard: count, total, largest."""

    documents: int = 0
    tokens: int = 0
    longest: int = 0

    def add(self, lengths) -> None:
        if len(lengths):
            self.documents += len(lengths)
            self.tokens += int(lengths.sum())
            self.longest = max(self.longest, int(lengths.max()))

    def describe(self) -> str:
        mean = self.tokens / self.documents if self.documents else 0.0
        return f"mean {mean:,.1f}, longest {count(self.longest)}"


@dataclass
class Summary:
    """A headline and facts; ``optional`` facts are dropped, last first, to fit inline."""

    headline: str
    facts: list[tuple[str, str]] = field(default_factory=list)
    optional: list[tuple[str, str]] = field(default_factory=list)

    def markdown(self) -> str:
        return fit(self.headline, self.facts, self.optional)


def fit(headline: str, facts: list[tuple[str, str]], optional: list[tuple[str, str]]) -> str:
    """The headline and a list of facts, with as many ``optional`` facts as fit under
    :data:`INLINE_LIMIT` characters; a fact's value is cut when even the required ones do not."""
    kept = list(optional)
    while True:
        text = f"#### {headline}\n\n{facts_list([*facts, *kept])}"
        if len(text) <= INLINE_LIMIT:
            return text
        if not kept:
            break
        kept.pop()
    room = max(20, (INLINE_LIMIT - len(headline) - 40) // max(len(facts), 1) - 10)
    cut = [
        (name, value if len(value) <= room else value[: room - 1] + "…") for name, value in facts
    ]
    return f"#### {headline}\n\n{facts_list(cut)}"[:INLINE_LIMIT]


def common_facts(report: StageReport, backend: str) -> tuple[list, list]:
    """What every stage says: rows in, kept, rejected with the top reasons (required); the work
    done and the output folder (optional)."""
    rows_in = report.rows_in
    rejected = (
        f"{count(report.rows_rejected)} ({percent(report.rows_rejected, rows_in)}): "
        + top_reasons(report.reject_reasons, rows_in)
        if report.rows_rejected
        else "none"
    )
    facts = [
        ("rows in", count(rows_in)),
        ("kept", f"{count(report.rows_out)} ({percent(report.rows_out, rows_in)})"),
        ("rejected", rejected),
    ]
    work = (
        f"{count(len(report.shards))} shards ({count(report.computed)} computed, "
        f"{count(report.skipped)} reused) in {duration(report.seconds)}, "
        f"{rate(rows_in, report.seconds, 'rows')}" + (f" on {backend}" if backend else "")
    )
    optional = [("work", work), ("output", output(report.folder))]
    return facts, optional


def output(folder: str) -> str:
    """The output folder as its place in the warehouse and the warehouse's path, two pieces
    the UI can wrap between."""
    path = location_path(folder)
    return (
        f"{code_span(path.parent.name + '/' + path.name)} in {code_span(str(path.parent.parent))}"
    )


def raw_documents_summary(report: StageReport, files: int, backend: str) -> Summary:
    facts, optional = common_facts(report, backend)
    ignored = int(report.extra.get("ignored_inputs_count") or 0)
    if ignored:
        facts.append(("files ignored", f"{count(ignored)} (not a format it reads)"))
    headline = f"{count(report.rows_out)} documents read from {count(files)} file(s)"
    return Summary(headline, facts, optional)


def normalized_documents_summary(report: StageReport, backend: str) -> Summary:
    facts, optional = common_facts(report, backend)
    preset = report.extra.get("preset")
    headline = f"{count(report.rows_out)} documents normalized" + (
        f" (preset {preset})" if preset else ""
    )
    return Summary(headline, facts, optional)


def tokenized_documents_summary(report: StageReport, lengths: LengthStats, backend: str) -> Summary:
    facts, optional = common_facts(report, backend)
    tokenizer = report.extra.get("tokenizer", "")
    tokens = int(report.extra.get("tokens", lengths.tokens))
    facts[1:1] = [
        ("tokens", count(tokens)),
        ("tokens per document", lengths.describe()),
    ]
    optional.insert(0, ("speed", rate(tokens, report.seconds, "tokens")))
    headline = f"{count(report.rows_out)} documents, {count(tokens)} tokens" + (
        f" ({tokenizer})" if tokenizer else ""
    )
    return Summary(headline, facts, optional)


def filtered_documents_summary(
    report: StageReport, kept: LengthStats, given: LengthStats, backend: str
) -> Summary:
    facts, optional = common_facts(report, backend)
    facts.insert(2, ("tokens kept", f"{count(kept.tokens)} ({percent(kept.tokens, given.tokens)})"))
    duplicates = [
        f"{count(report.extra[key])} {name}"
        for key, name in (("exact_duplicates", "exact"), ("near_duplicates", "near"))
        if report.extra.get(key)
    ]
    if duplicates:
        facts.append(("duplicates", ", ".join(duplicates)))
    if report.extra.get("filters"):
        optional.insert(0, ("filters", str(report.extra["filters"])))
    headline = (
        f"{count(report.rows_out)} of {count(report.rows_in)} documents kept "
        f"({percent(report.rows_out, report.rows_in)})"
    )
    return Summary(headline, facts, optional)


def training_batches_summary(report: StageReport, backend: str) -> Summary:
    extra = report.extra
    seq_len = int(extra.get("seq_len") or 0)
    tokens, padding = int(extra.get("tokens", 0)), int(extra.get("padding_tokens", 0))
    truncated, dropped = int(extra.get("truncated_tokens", 0)), int(extra.get("dropped_tokens", 0))
    given = tokens + truncated + dropped
    splits: dict[str, int] = {}
    for shard in report.shards:
        split = shard.shard.rsplit("-", 1)[0]
        splits[split] = splits.get(split, 0) + shard.rows_out
    facts = [
        ("sequences", ", ".join(f"{name} {count(n)}" for name, n in splits.items()) or "0"),
        ("documents", count(extra.get("documents", report.rows_in))),
        ("tokens", count(tokens)),
        ("padding", f"{count(padding)} tokens ({percent(padding, tokens + padding)})"),
        (
            "lost at seq_len",
            f"{count(truncated)} truncated, {count(dropped)} dropped "
            f"({percent(truncated + dropped, given)} of the tokens)",
        ),
    ]
    warehouse = location_path(report.folder).parent.parent
    # A space after "(" lets the UI wrap the line before the path (valid Python still).
    reader = code_span(f'TokenBatchDataset.from_warehouse( "{warehouse}", split="train")')
    if is_remote(report.folder):  # its catalog is elsewhere: the folder itself
        reader = code_span(f'TokenBatchDataset( "{report.folder}", split="train")')
    optional = [
        ("read with", reader),
        (
            "work",
            f"{count(len(report.shards))} files ({count(report.skipped)} reused) in "
            f"{duration(report.seconds)}" + (f" on {backend}" if backend else ""),
        ),
        ("output", output(report.folder)),
    ]
    headline = (
        f"{count(report.rows_out)} sequences of {count(seq_len)} tokens, {extra.get('layout', '')}"
    )
    return Summary(headline, facts, optional)


def benchmark_summary(
    fastest: dict[int, tuple[str, float, float]], machine: dict, recorded: int
) -> Summary:
    """``benchmark_report``: the fastest backend per corpus size (rows -> backend, rows per
    second, peak memory in MB), the machine, and the repetitions recorded."""
    facts = [
        (
            f"{count(size)} rows",
            f"{backend}, {count(speed)} rows/s, {count(memory)} MB peak",
        )
        for size, (backend, speed, memory) in sorted(fastest.items())
    ]
    cores, memory_gb = machine.get("cores"), machine.get("memory_gb")
    optional = [
        ("machine", f"{cores} cores, {memory_gb} GB"),
        ("recorded", f"{count(recorded)} repetitions in table benchmark_results"),
    ]
    return Summary("Fastest backend per corpus size", facts, optional)
