"""Tokenizers through transformers: a local ``tokenizer.json`` or tokenizer folder, read from
the files transformers builds it from and only those, and the encoders of every transformers
tokenizer (GPT-2's ``hf`` engine too)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from llm_assets.kernels.tokenize.tokenizer import Tokenizer, TokenizerError, _files_fingerprint

if TYPE_CHECKING:
    from llm_assets.kernels.tokenize.tokenizer import _Encoder


HF_LOADER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "config.json",
)
"""What transformers reads from a tokenizer folder whatever the tokenizer's class (``config.json``
too: ``AutoTokenizer`` picks the class from it). The class adds its own vocabulary files (its
``vocab_files_names``: GPT-2's ``vocab.json`` and ``merges.txt``, a sentencepiece model, ...).
Nothing else in the folder, such as a model's weights, is read, hashed or watched."""


def _hf_encoder(tok: object, *, split_special_tokens: bool = True) -> _Encoder:
    """transformers' batch encoding without added BOS/EOS; special-token strings in the text are
    plain text unless ``split_special_tokens`` is False (for chat markup:
    :meth:`Tokenizer.encode_markup_batch`)."""

    def encode(texts: list[str]) -> list[list[int]]:
        return _hf_call(tok, texts, split_special_tokens)["input_ids"] if texts else []

    return encode


def _hf_offsets_encoder(tok: object) -> Callable[[list[str]], list[tuple[list[int], list[int]]]]:
    """transformers' markup encoding (special tokens recognized) with each token's start."""

    def encode(texts: list[str]) -> list[tuple[list[int], list[int]]]:
        if not texts:
            return []
        try:
            out = _hf_call(tok, texts, False, return_offsets_mapping=True)
        except NotImplementedError as err:
            raise TokenizerError(
                f"{type(tok).__name__} cannot say where its tokens start ({err}), which "
                "chat_answers: all needs to find each answer's tokens: give a fast tokenizer "
                "(a folder with tokenizer.json)"
            ) from err
        return [
            (ids, [start for start, _ in offsets])
            for ids, offsets in zip(out["input_ids"], out["offset_mapping"], strict=True)
        ]

    return encode


def _hf_call(tok: object, texts: list[str], split_special_tokens: bool, **options: bool) -> dict:
    """``tok(texts)`` as every encoding here calls it: no added BOS/EOS, no attention mask."""
    return tok(  # type: ignore[operator]
        texts,
        add_special_tokens=False,
        split_special_tokens=split_special_tokens,
        return_attention_mask=False,
        verbose=False,
        **options,
    )


def _hf_chat_fields(tok: object) -> dict:
    """A transformers tokenizer's :class:`Tokenizer` fields for chat prompts: the encoder that
    recognizes special tokens, the control tokens a message may not hold, and its
    ``special_tokens_map`` for templates (and its decoder, for people to read rows).

    Control tokens: the named special tokens, every added token marked special, and the added
    tokens not marked special that look like markup (:func:`_is_markup`): DeepSeek's role markers
    ``<｜User｜>`` and Qwen's ``<tool_call>`` are such tokens, which transformers matches in any
    text. Added tokens of only letters, digits and whitespace (the runs of spaces some code models
    add, a domain's words) are ordinary text: refusing every message holding two spaces would
    drop most of a data set."""
    added = tok.added_tokens_decoder.values()  # type: ignore[attr-defined]
    special = {str(t) for t in tok.all_special_tokens}  # type: ignore[attr-defined]
    special |= {t.content for t in added if t.special}
    control = special | {t.content for t in added if _is_markup(t.content)}
    return {
        "decoder": partial(
            tok.decode,  # type: ignore[attr-defined]
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        ),
        "markup_encoder": _hf_encoder(tok, split_special_tokens=False),
        "offsets_encoder": _hf_offsets_encoder(tok),
        "special_tokens": tuple(sorted(t for t in control if t)),
        "text_special_tokens": tuple(sorted(t for t in special if t)),
        "template_vars": tuple(sorted(tok.special_tokens_map.items())),  # type: ignore[attr-defined]
    }


def _is_markup(token: str) -> bool:
    """Whether a token holds a character other than letters, digits, ``_`` and whitespace
    (``<think>``, ``[INST]``, ``<｜User｜>``), as chat markup does."""
    return any(not (char.isalnum() or char.isspace() or char == "_") for char in token)


def _hf_local(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` file or a tokenizer folder through transformers. Whatever fails while
    building it (a file that is not a tokenizer, a folder without the files its class needs) is a
    :class:`TokenizerError` naming the path and the files read, with transformers' reason."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        if path.is_file():
            tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
        else:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        ids = tok.get_vocab().values()
    except Exception as exc:  # tokenizers raises bare Exceptions for unreadable JSON
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise TokenizerError(
            f"tokenizer {str(path)!r} ({_present_names(path)}) cannot be built by transformers: "
            f"{reason}. Give a tokenizer.json (tokenizers' format), or a folder written by "
            "save_pretrained"
        ) from exc
    if not ids:
        raise TokenizerError(f"tokenizer at {path} has an empty vocabulary")
    eos_id = tok.eos_token_id
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_id
    sources = _local_sources(path, type(tok))
    return Tokenizer(
        name=str(path),
        engine="hf",
        fingerprint=_files_fingerprint(*(Path(p) for p in sources if Path(p).is_file())),
        vocab_size=max(ids) + 1,
        eos_id=eos_id,
        pad_id=0 if pad_id is None else pad_id,
        encoder=_hf_encoder(tok),
        sources=sources,
        **_hf_chat_fields(tok),
    )


def _local_sources(path: Path, tokenizer_class: type) -> tuple[str, ...]:
    """The files a local tokenizer is read from, in name order: the file itself, or in a folder
    :data:`HF_LOADER_FILES` and the class's vocabulary files, present or not."""
    if path.is_file():
        return (str(path),)
    names = set(HF_LOADER_FILES) | set(getattr(tokenizer_class, "vocab_files_names", {}).values())
    return tuple(str(path / name) for name in sorted(names))


def _present_names(path: Path) -> str:
    """What a tokenizer path holds, for error messages: a file's name, or a folder's
    :data:`HF_LOADER_FILES` that exist."""
    if path.is_file():
        return f"file {path.name}"
    present = [name for name in HF_LOADER_FILES if (path / name).is_file()]
    return f"folder with {', '.join(present) or f'none of {HF_LOADER_FILES}'}"
