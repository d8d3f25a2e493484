"""The kernel of ``tokenized_documents``: a table's documents tokenized, with their prompts."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pyarrow as pa

from llm_assets.kernels.schema import (
    INPUT_IDS,
    LEARNED_SPANS,
    LEARNED_SPANS_TYPE,
    METADATA,
    N_TOKENS,
    PROMPT,
    PROMPT_TOKENS,
    TEXT,
    StageResult,
    drop_rows,
    empty_rejects,
)
from llm_assets.kernels.tokenize.chat_render import (
    CHAT_TEMPLATE_ERROR,
    SPECIAL_TOKEN_IN_CHAT,
    render_chat,
)
from llm_assets.kernels.tokenize.chat_template import chat_template_text
from llm_assets.kernels.tokenize.ids import ids_to_arrow
from llm_assets.kernels.tokenize.masking import _prompt_ids_and_spans, _spans_array, chat_answer_ids
from llm_assets.kernels.tokenize.prompts import MISSING_PROMPT_FIELD, render_prompts

if TYPE_CHECKING:
    from llm_assets.kernels.tokenize.spec import TokenizerSpec


TOKENIZE_STAGE = "tokenize"
REJECT_REASONS: tuple[str, ...] = (MISSING_PROMPT_FIELD, CHAT_TEMPLATE_ERROR, SPECIAL_TOKEN_IN_CHAT)
"""Every reason ``tokenized_documents`` rejects a row for."""


def tokenize_table(table: pa.Table, spec: TokenizerSpec) -> StageResult:
    """Kernel of ``tokenized_documents``: append ``input_ids`` and ``n_tokens`` (an empty token
    list is kept and left to the length filter, which records why it goes). With a prompt or chat
    template, ids are prompt then response and ``prompt_tokens`` and the rendered ``prompt`` are
    added; a row the template cannot render is a reject (``missing_prompt_field``, and for chat
    ``chat_template_error`` or ``special_token_in_chat``). A chat prompt's special tokens are
    encoded as such (:meth:`Tokenizer.encode_markup_batch`), and the response is the template's
    rendering of the answer (:func:`chat_answer_ids`), never an answer's special token's id."""
    tok = spec.build()
    rejects = empty_rejects()
    prompt_ids = None
    chat = chat_template_text(spec)
    if spec.prompt_template is not None or spec.chat_template is not None:
        metadata = table[METADATA].to_pylist() if METADATA in table.column_names else []
        metadata = metadata or [None] * table.num_rows
        answers = table.column(TEXT).to_pylist()
        completions: list[str | None] = []
        regions: list[list[tuple[int, int]]] = []
        if chat is not None:
            rendering = render_chat(metadata, answers, chat, tok)
            prompts, completions, reasons, regions = (
                rendering.prompts,
                rendering.completions,
                rendering.rejects,
                rendering.regions,
            )
        else:
            prompts, missing = render_prompts(metadata, spec.prompt_template or "")
            reasons = [None if m is None else (MISSING_PROMPT_FIELD, m) for m in missing]
        refused = [r for r in reasons if r is not None]
        if refused:
            result = drop_rows(
                table,
                [r is not None for r in reasons],
                stage=TOKENIZE_STAGE,
                reasons=[reason for reason, _ in refused],
                values=[value for _, value in refused],
            )
            table, rejects = result.kept, result.rejects
            kept = [r is None for r in reasons]
            prompts = list(itertools.compress(prompts, kept))
            completions = list(itertools.compress(completions, kept))
            answers = list(itertools.compress(answers, kept))
            regions = list(itertools.compress(regions, kept))
        if chat is not None:
            prompt_ids, spans = _prompt_ids_and_spans(tok, prompts, regions)
            responses = chat_answer_ids(tok, prompts, prompt_ids, completions, answers)
        else:
            prompt_ids = tok.encode_batch(prompts)
            responses = tok.encode_batch(answers)
    if prompt_ids is None:
        lists, counts = tok.encode_arrow(table.column(TEXT))
    else:
        ids = [p + r for p, r in zip(prompt_ids, responses, strict=True)]
        lists, counts = ids_to_arrow(ids, tok.vocab_size)
    table = table.append_column(pa.field(INPUT_IDS, lists.type, nullable=False), lists)
    table = table.append_column(pa.field(N_TOKENS, pa.int32(), nullable=False), counts)
    if prompt_ids is not None:
        lengths = pa.array([len(p) for p in prompt_ids], pa.int32())
        table = table.append_column(pa.field(PROMPT_TOKENS, pa.int32(), nullable=False), lengths)
        table = table.append_column(
            pa.field(PROMPT, pa.string(), nullable=False), pa.array(prompts, pa.string())
        )
    if chat is not None:
        for row, response in enumerate(responses):
            if response:
                spans[row].append((len(prompt_ids[row]), len(prompt_ids[row]) + len(response)))
        table = table.append_column(
            pa.field(LEARNED_SPANS, LEARNED_SPANS_TYPE, nullable=False), _spans_array(spans)
        )
    return StageResult(table, rejects)
