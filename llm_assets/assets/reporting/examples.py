"""Rows decoded back to text, so a person sees what the model trains on without reading ids: an
SFT row of ``tokenized_documents`` and a few sequences of ``training_batches``, with the part
masked out of the loss marked."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llm_assets import storage
from llm_assets.assets.reporting.markdown import _escape, _fenced, count
from llm_assets.kernels.batching.sequences import ATTENTION_MASK, IGNORE_INDEX, LABELS
from llm_assets.kernels.schema import DOC_ID, INPUT_IDS, LEARNED_SPANS, PROMPT_TOKENS
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.tokenizer import Tokenizer, TokenizerError
from llm_assets.stages.engine import StageReport

_EXAMPLE_CHARS = 1500
"""Characters of an SFT example's prompt shown (its end: where the answer joins it), and of its
learned text (its start and end)."""


def sft_example_markdown(report: StageReport, tok: Tokenizer) -> str:
    """An SFT row of the output as a model trains on it: its prompt (masked out of the loss) and
    the tokens it learns, decoded with special tokens written out, so a person sees what the
    template made of a conversation (the turn's end learned, a header not) without reading ids.
    The first row, or the first of the first row group learning more than one answer
    (``chat_answers: all``: masked and learned parts alternate). Empty when the rows have no
    prompt."""
    for shard in report.shards:
        if not shard.rows_out:
            continue
        footer = storage.parquet_file(shard.path)
        names = footer.schema_arrow.names
        if PROMPT_TOKENS not in names:
            return ""
        columns = [DOC_ID, INPUT_IDS, PROMPT_TOKENS]
        columns += [LEARNED_SPANS] if LEARNED_SPANS in names else []
        rows = footer.read_row_group(0, columns=columns).to_pylist()
        row = next((r for r in rows if len(r.get(LEARNED_SPANS) or ()) > 1), rows[0])
        ids, cut = row[INPUT_IDS], row[PROMPT_TOKENS]
        spans = [(s["start"], s["end"]) for s in row.get(LEARNED_SPANS) or ()]
        spans = spans or ([(cut, len(ids))] if cut < len(ids) else [])
        parts, at = [], 0
        for start, end in [*spans, (len(ids), len(ids))]:
            if start > at:
                text = tok.decode(ids[at:start])
                if len(text) > _EXAMPLE_CHARS:
                    text = "…" + text[-_EXAMPLE_CHARS:]
                parts += ["**Prompt**" if at == 0 else "**Masked**", _fenced(text)]
            if end > start:
                text = tok.decode(ids[start:end])
                if len(text) > _EXAMPLE_CHARS:
                    half = _EXAMPLE_CHARS // 2
                    text = f"{text[:half]}\n…\n{text[-half:]}"
                parts += ["**Learned**", _fenced(text)]
            at = end
        learned = sum(end - start for start, end in spans)
        answers = f" in {len(spans)} parts" if len(spans) > 1 else ""
        return "\n".join(
            [
                f"Row `{row[DOC_ID]}`: {len(ids) - learned} token(s) masked out of the loss and "
                f"{learned} learned token(s){answers} (the batches add EOS after them).",
                "",
                *parts,
            ]
        )
    return ""


# --- training batches ---------------------------------------------------------------------------
_BATCH_ROWS = 3
_ROW_CHARS = 900
"""Characters of a decoded sequence shown: its start and its end, "…" between."""
LEARNED, MASKED, PADDING = "learned", "masked", "padding"


def batch_tokenizer(name: str, fingerprint: str) -> Tokenizer | None:
    """The tokenizer the batches' footers name, when it is still the one that made them (same
    vocabulary fingerprint); None otherwise (its files changed or are gone)."""
    try:
        tok = TokenizerSpec(name=name).build()
    except (TokenizerError, OSError, ValueError):
        return None
    return tok if tok.fingerprint == fingerprint else None


def position_kinds(
    input_ids: Sequence[int], attention_mask: Sequence[int] | None, labels: Sequence[int] | None
) -> list[tuple[str, int, int]]:
    """A sequence's positions as runs ``(kind, start, end)``: padding (attention mask 0),
    masked (label -100: the prompt, not learned) or learned."""
    n = len(input_ids)
    mask = np.ones(n, dtype=bool) if attention_mask is None else np.asarray(attention_mask) > 0
    ignored = np.zeros(n, dtype=bool) if labels is None else np.asarray(labels) == IGNORE_INDEX
    kinds = np.where(~mask, 0, np.where(ignored, 1, 2))
    names = (PADDING, MASKED, LEARNED)
    runs, start = [], 0
    for i in range(1, n + 1):
        if i == n or kinds[i] != kinds[start]:
            runs.append((names[kinds[start]], start, i))
            start = i
    return runs


def _clip(parts: list[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """``parts`` (kind, text) cut to about ``limit`` characters: its first two thirds and its
    last third, ``…`` where the middle was."""
    total = sum(len(text) for _, text in parts)
    if total <= limit:
        return parts
    head, tail = 2 * limit // 3, limit // 3

    def take(items: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
        taken = []
        for kind, text in items:
            if budget <= 0:
                break
            taken.append((kind, text[:budget]))
            budget -= len(text)
        return taken

    ending = [(k, t[::-1]) for k, t in take([(k, t[::-1]) for k, t in reversed(parts)], tail)]
    return [*take(parts, head), ("cut", "…"), *reversed(ending)]


def _render(kind: str, text: str) -> str:
    """One part of a sequence as a line of Markdown: masked text in italics (the markers kept
    off its surrounding spaces, else Markdown does not read them as emphasis), learned text
    upright, the cut as ``[…]``. Its own line, so no marker touches the next part's text."""
    if kind == "cut":
        return "**[…]**"
    shown = text.replace("\n", "↵")
    core = shown.strip()
    if kind != MASKED or not core:
        return _escape(shown)
    return f"*{_escape(core)}*"


def decoded_row_markdown(row: dict, tok: Tokenizer) -> str:
    """One sequence as text in a quote, a line per part: masked text (label -100) in italics,
    learned text upright, a run of padding as its count; line breaks in the text as ↵."""
    runs = position_kinds(row[INPUT_IDS], row.get(ATTENTION_MASK), row.get(LABELS))
    parts = []
    padding = 0
    for kind, start, end in runs:
        if kind == PADDING:
            padding += end - start
            continue
        parts.append((kind, tok.decode(list(row[INPUT_IDS][start:end]))))
    lines = [_render(kind, part) for kind, part in _clip(parts, _ROW_CHARS)]
    if padding:
        lines.append(f"*[{count(padding)} padding]*")
    counts = {kind: sum(e - s for k, s, e in runs if k == kind) for kind in (LEARNED, MASKED)}
    facts = f"{count(len(row[INPUT_IDS]))} positions: {count(counts[LEARNED])} learned"
    facts += f", {count(counts[MASKED])} masked" if counts[MASKED] else ""
    facts += f", {count(padding)} padding" if padding else ""
    return f"{facts}\n\n" + "\\\n".join(f"> {line}" for line in lines)


def batch_rows_markdown(report: StageReport, tok: Tokenizer | None, rows: int = _BATCH_ROWS) -> str:
    """The first ``rows`` sequences of the first train file decoded to text, the masked part
    (label -100, not learned) marked; without a tokenizer that can decode, a note saying why."""
    if tok is None or tok.decoder is None:
        return "_the tokenizer that made these batches cannot be rebuilt here: no decoded rows_"
    for shard in report.shards:
        if not shard.rows_out:
            continue
        footer = storage.parquet_file(shard.path)
        names = footer.schema_arrow.names
        columns = [c for c in (INPUT_IDS, ATTENTION_MASK, LABELS) if c in names]
        table = footer.read_row_group(0, columns=columns).slice(0, rows)
        masked = LABELS in names
        legend = (
            "Upright text is learned; *italics* are masked out of the loss (label -100): the "
            "model reads them but is not trained to write them. ↵ is a line break; special "
            "tokens are written out."
            if masked
            else "Every real token is learned (no labels column); ↵ is a line break; special "
            "tokens (a document's end) are written out."
        )
        blocks = [legend]
        for i, row in enumerate(table.to_pylist(), 1):
            blocks.append(f"**{shard.shard}, row {i}**: " + decoded_row_markdown(row, tok))
        return "\n\n".join(blocks)
    return "_no sequences_"
