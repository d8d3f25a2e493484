"""The learned tokens of SFT rows: a chat answer's ids as the template writes them, and the
token ranges of the earlier answers a chat prompt holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from llm_assets.kernels.schema import LEARNED_SPANS_TYPE

if TYPE_CHECKING:
    from llm_assets.kernels.tokenize.tokenizer import Tokenizer


def chat_answer_ids(
    tok: Tokenizer,
    prompts: list[str],
    prompt_ids: list[list[int]],
    completions: list[str | None],
    answers: list[str],
) -> list[list[int]]:
    """The learned ids of each chat row (:func:`render_chat`), as TRL takes them: the ids of
    prompt and completion encoded together, less the prompt's ids (so a tokenizer that adds a
    space before a text's first word, as SentencePiece does, adds none before the answer), or
    the completion encoded alone when those do not start with the prompt's (a merge across the
    join), special tokens recognized (a completion holds none of the answer's). A final EOS
    the template writes is dropped: the batches add EOS after every document, once. A row
    without a completion learns its answer alone, as a document (special tokens as text).

    With GPT-2's pre-tokenizer (:attr:`Tokenizer.words_exact`) only the prompt's last line is
    encoded again with the completion (:func:`_line_cut`), not the whole conversation."""
    rows = [row for row, completion in enumerate(completions) if completion is not None]
    cuts = {row: _line_cut(prompts[row]) for row in rows} if tok.words_exact else {}
    heads = {row: prompts[row][cuts.get(row, 0) :] for row in rows}
    cut_rows = [row for row in rows if cuts.get(row, 0)]
    head_ids = dict(
        zip(cut_rows, tok.encode_markup_batch([heads[r] for r in cut_rows]), strict=True)
    )
    for row in cut_rows:
        whole = prompt_ids[row]
        if whole[len(whole) - len(head_ids[row]) :] != head_ids[row]:
            heads[row], head_ids[row] = prompts[row], whole  # not a piece boundary: no cut
    joined = tok.encode_markup_batch([heads[row] + completions[row] for row in rows])
    learned: dict[int, list[int]] = {}
    apart: list[int] = []
    for row, ids in zip(rows, joined, strict=True):
        head = head_ids.get(row, prompt_ids[row])
        if ids[: len(head)] == head:
            learned[row] = ids[len(head) :]
        else:
            apart.append(row)
    alone = tok.encode_markup_batch([completions[row] for row in apart])
    learned.update(zip(apart, alone, strict=True))
    bare = [row for row, completion in enumerate(completions) if completion is None]
    plain = dict(zip(bare, tok.encode_batch([answers[row] for row in bare]), strict=True))
    responses = []
    for row in range(len(completions)):
        if row in plain:
            responses.append(plain[row])
            continue
        ids = learned[row]
        responses.append(ids[:-1] if ids and ids[-1] == tok.eos_id else ids)
    return responses


def _line_cut(prompt: str) -> int:
    """Where the prompt's last line starts (0: none): the index after its last line break
    followed by a character other than whitespace. GPT-2's pre-tokenizer always ends a piece
    there, and the pieces before it depend on no text after it: a prompt's ids are those of the
    text before the cut, then of the text from it, and so are the ids of the prompt followed by
    anything (its regex looks one character ahead at most, within the prompt)."""
    end = len(prompt)
    while (found := prompt.rfind("\n", 0, end)) >= 0:
        if found + 1 < len(prompt) and not prompt[found + 1].isspace():
            return found + 1
        end = found
    return 0


def _prompt_ids_and_spans(
    tok: Tokenizer, prompts: list[str], regions: list[list[tuple[int, int]]]
) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """Each chat prompt's ids (:meth:`Tokenizer.encode_markup_batch`) and the token ranges of
    its character ``regions`` (earlier answers to learn): the tokens holding any of a region's
    characters, found by where each token starts (:meth:`Tokenizer.encode_markup_offsets`, for
    the rows with regions only), as TRL maps an assistant mask's characters to tokens."""
    with_regions = [row for row, found in enumerate(regions) if found]
    located = dict(
        zip(
            with_regions,
            tok.encode_markup_offsets([prompts[row] for row in with_regions]),
            strict=True,
        )
    )
    others = [row for row in range(len(prompts)) if row not in located]
    plain = dict(zip(others, tok.encode_markup_batch([prompts[r] for r in others]), strict=True))
    prompt_ids: list[list[int]] = []
    spans: list[list[tuple[int, int]]] = []
    for row, prompt in enumerate(prompts):
        if row not in located:
            prompt_ids.append(plain[row])
            spans.append([])
            continue
        ids, token_starts = located[row]
        starts = np.maximum.accumulate(np.asarray(token_starts, dtype=np.int64))
        ends = np.append(starts[1:], len(prompt))
        row_spans: list[tuple[int, int]] = []
        for start, end in regions[row]:
            first = int(np.searchsorted(ends, start, side="right"))
            stop = int(np.searchsorted(starts, end, side="left"))
            first = max(first, row_spans[-1][1]) if row_spans else first
            if first < stop:
                row_spans.append((first, stop))
        prompt_ids.append(ids)
        spans.append(row_spans)
    return prompt_ids, spans


def _spans_array(spans: list[list[tuple[int, int]]]) -> pa.Array:
    """Rows of ``(start, end)`` pairs as a :data:`LEARNED_SPANS` column."""
    counts = np.fromiter(map(len, spans), dtype=np.int32, count=len(spans))
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int32)])
    flat = np.array([pair for row in spans for pair in row], dtype=np.int32).reshape(-1, 2)
    values = pa.StructArray.from_arrays(
        [pa.array(flat[:, 0]), pa.array(flat[:, 1])], fields=list(LEARNED_SPANS_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=LEARNED_SPANS_TYPE)
