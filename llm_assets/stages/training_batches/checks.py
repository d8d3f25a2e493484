"""Refusals of ``training_batches`` configs that do not go together, before any work."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llm_assets.constants import FILTERED_DOCUMENTS, TOKENIZED_DOCUMENTS, TRAINING_BATCHES
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.schema import PROMPT_TOKENS
from llm_assets.kernels.tokenize.spec import ENGINES, TokenizerSpec
from llm_assets.kernels.tokenize.tokenizer import TokenizerError
from llm_assets.stages.engine import StageInputError
from llm_assets.stages.shard_io import TOKENIZER_META


def label_needs_a_padded_layout(layout: str) -> str:
    """Why ``filtered_documents.config.label_field`` and the ``packed`` layout do not go
    together: a packed block joins several documents, so it has no ``label`` column and every
    label would be dropped without a word."""
    return (
        f"{FILTERED_DOCUMENTS}.config.label_field is set (labelled data), but "
        f"{TRAINING_BATCHES}.config.layout is {layout!r}: a packed block joins several documents "
        "and has no label column, so every label would be dropped. Set "
        f"{TRAINING_BATCHES}.config.layout to 'padded' or 'bucketed' (one document per row, "
        "with its label), or unset label_field"
    )


def balance_needs_labels(balance: str) -> str:
    """Why ``balance`` needs labelled documents: it evens out the classes of a ``label`` column."""
    return (
        f"{TRAINING_BATCHES}.config.balance is {balance!r}, but {FILTERED_DOCUMENTS} has no "
        "label column: balance evens out the class labels of the train split. Set "
        f"{FILTERED_DOCUMENTS}.config.label_field (and label_mapping), or balance: none"
    )


def balance_without_megatron(balance: str) -> str:
    """Why ``balance`` and the Megatron export do not go together."""
    return (
        f"{TRAINING_BATCHES}.config.balance is {balance!r} and megatron is true: the Megatron-LM "
        "export holds every document once, without labels, so it would not be balanced like "
        "the Parquet batches. Set megatron: false, or balance: none"
    )


def _augment_tokenizer(
    spec: BatchSpec, columns: Sequence[str], meta: Mapping[str, str], megatron: bool
) -> TokenizerSpec | None:
    """``augment``: the tokenizer that encodes the variants of the copies, the one that made the
    documents' ids (named in their footers); None without ``augment``. Refused (a
    :class:`StageInputError` naming the settings): SFT and chat rows (a variant of an answer
    would no longer answer its prompt), the Megatron export (it holds every document once), and
    a tokenizer whose files changed since ``tokenized_documents`` ran (the variants' ids would
    not be those of the documents')."""
    if spec.augment == "none":
        return None
    asset = TRAINING_BATCHES
    if PROMPT_TOKENS in columns:
        raise StageInputError(augment_without_prompts(spec.augment))
    if megatron:
        raise StageInputError(augment_without_megatron(spec.augment))
    name = meta.get(f"{TOKENIZER_META}name", "")
    engine = meta.get(f"{TOKENIZER_META}engine", "auto")
    recorded = meta.get(f"{TOKENIZER_META}fingerprint", "")
    try:
        tokenizer = TokenizerSpec(name=name, engine=engine if engine in ENGINES else "auto")
        found = tokenizer.identity().fingerprint
    except TokenizerError as err:
        raise StageInputError(
            f"{asset}.config.augment needs the tokenizer that made the documents' ids "
            f"({name!r}) to encode the variants, and it cannot be built: {err}"
        ) from err
    if found != recorded:
        raise StageInputError(
            f"{asset}.config.augment: the tokenizer {name!r} has changed since "
            f"{TOKENIZED_DOCUMENTS} ran (fingerprint {found}, the documents' ids were made by "
            f"{recorded}): the variants' ids would not match the documents'. Materialize "
            f"{TOKENIZED_DOCUMENTS} again, or set augment: none"
        )
    return tokenizer


def augment_without_prompts(augment: str) -> str:
    """Why ``augment`` and SFT or chat rows do not go together."""
    return (
        f"{TRAINING_BATCHES}.config.augment is {augment!r}, but the documents are SFT or chat "
        "rows (a prompt before the text): a word edit of an answer would no longer answer its "
        f"prompt. Set augment: none, or unset {TOKENIZED_DOCUMENTS}.config.prompt_template and "
        "chat_template (balance: oversample repeats SFT rows as they are)"
    )


def augment_without_megatron(augment: str) -> str:
    """Why ``augment`` and the Megatron export do not go together."""
    return (
        f"{TRAINING_BATCHES}.config.augment is {augment!r} and megatron is true: the "
        "Megatron-LM export holds every document once, so it would not hold the variants the "
        "Parquet batches do. Set megatron: false, or augment: none"
    )


MIXTURE_WITHOUT_MEGATRON = (
    f"{TRAINING_BATCHES}.config.mixture is set and megatron is true: the Megatron-LM export "
    "holds every document once, so it would not be mixed like the Parquet batches. Megatron-LM "
    "blends sources itself (--data-path with a weight before each prefix): set megatron: false, "
    "or leave mixture.sources empty"
)
"""Why ``mixture`` and the Megatron export do not go together."""


def _eos_id(meta: dict[str, str], spec: BatchSpec, megatron: bool, *, sft: bool) -> int | None:
    """The tokenizer's EOS id from the filtered shards' footer, or None when it has none; a
    :class:`StageInputError` before any batching work when the config needs one."""
    text = meta.get(f"{TOKENIZER_META}eos_id", "")
    if text:
        return int(text)
    needs = [
        why
        for wanted, why in (
            (spec.layout == "packed", "layout packed separates documents with it"),
            (megatron, "megatron: true ends every document with it"),
            (sft and spec.layout != "packed", "SFT rows in layout padded or bucketed end with it"),
        )
        if wanted
    ]
    if needs:
        name = meta.get(f"{TOKENIZER_META}name", "?")
        raise StageInputError(
            f"{TRAINING_BATCHES}: the tokenizer {name!r} has no EOS token, and "
            f"{'; '.join(needs)}: use a tokenizer that has one, or layout padded or bucketed "
            "(without megatron, and for plain text rather than SFT rows)"
        )
    return None
