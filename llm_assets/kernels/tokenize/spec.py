"""Which tokenizer ``tokenized_documents`` uses (:class:`TokenizerSpec`), and its build in a
per-process cache that builds a local tokenizer again when its files change."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from llm_assets.kernels.tokenize.chat_template import chat_template_text, compiled_chat_template
from llm_assets.kernels.tokenize.gpt2 import (
    GPT2,
    GPT2_EOS_ID,
    GPT2_VOCAB_SIZE,
    _gpt2_hf,
    _gpt2_tiktoken,
    gpt2_files,
)
from llm_assets.kernels.tokenize.hf import _hf_local
from llm_assets.kernels.tokenize.prompts import prompt_fields
from llm_assets.kernels.tokenize.tokenizer import TokenizerError, _files_fingerprint

if TYPE_CHECKING:
    from llm_assets.kernels.tokenize.tokenizer import Tokenizer


ENGINES = ("auto", "tiktoken", "hf")
HF_FOLDER_FILES = ("tokenizer.json", "tokenizer_config.json")
"""A tokenizer folder holds at least one of these (what ``AutoTokenizer`` reads locally)."""
_LOCAL_CACHE_SIZE = 8


@dataclass(frozen=True)
class TokenizerSpec:
    """Which tokenizer ``tokenized_documents`` uses; small and picklable, built in each worker."""

    name: str = field(
        default=GPT2,
        metadata={"doc": "'gpt2' (offline) or a path to tokenizer.json / an HF tokenizer folder"},
    )
    """``gpt2`` or a path to a ``tokenizer.json`` file or a Hugging Face tokenizer folder."""
    engine: Literal["auto", "tiktoken", "hf"] = field(
        default="auto",
        metadata={
            "doc": "auto: tiktoken for GPT-2 (same ids, faster), transformers otherwise; "
            "or force one"
        },
    )
    threads: int = field(default=1, metadata={"doc": "Tokenizer threads inside each worker"})
    """Threads of the tiktoken engine inside one worker (the backends parallelize across shards)."""
    prompt_template: str | None = field(
        default=None,
        metadata={
            "doc": "SFT: format template over the record's fields, tokenized before the text "
            "(the response); its tokens are masked out of the labels"
        },
    )
    """SFT: a ``str.format`` template over the record's other fields (``metadata``), e.g.
    ``"### Instruction:\n{instruction}\n\n### Response:\n"``. The rendered prompt is tokenized
    before the document's text (the response), and ``prompt_tokens`` says how many leading ids
    are the prompt so the batches can mask them out of the loss."""
    chat_template: str | None = field(
        default=None,
        metadata={
            "doc": "Chat SFT (raw_documents' chat_field): 'chatml', 'tokenizer' (the "
            "tokenizer folder's own template) or a Jinja chat template (as in a "
            "tokenizer_config.json) rendering the conversation before the answer into the "
            "prompt, whose tokens are masked out of the labels"
        },
    )
    """SFT from conversations (metadata key ``messages``, the turns before the response): a
    Hugging Face style Jinja chat template rendered over them with ``add_generation_prompt``, as
    ``apply_chat_template`` does. ``chatml`` (built in: :data:`CHATML_TEMPLATE`), ``tokenizer``
    (the tokenizer folder's own: ``chat_template.jinja`` or its ``tokenizer_config.json``), or a
    template's text. Exclusive with ``prompt_template``; ``prompt_tokens`` as with it."""

    def __post_init__(self) -> None:
        if self.prompt_template is not None and self.chat_template is not None:
            raise TokenizerError(
                "prompt_template and chat_template are both set: give one or the other "
                "(chat_template renders conversations, prompt_template a record's fields)"
            )
        if self.prompt_template is not None:
            prompt_fields(self.prompt_template)
        if self.engine not in ENGINES:
            raise TokenizerError(f"tokenizer engine must be one of {ENGINES}, got {self.engine!r}")
        if self.threads < 1:
            raise TokenizerError(f"tokenizer threads must be >= 1, got {self.threads}")
        if self.name != GPT2:
            # Checked on disk only (a stat and a folder listing): a name that is not a local
            # path is never looked up on a model hub, as nothing is downloaded at run time.
            path = Path(self.name)
            if not path.exists():
                raise TokenizerError(
                    f"tokenizer {self.name!r} is neither 'gpt2' nor an existing tokenizer.json "
                    "file or tokenizer folder"
                )
            if path.is_dir() and not any((path / name).is_file() for name in HF_FOLDER_FILES):
                raise TokenizerError(
                    f"tokenizer folder {self.name!r} holds none of {HF_FOLDER_FILES}, the files "
                    "transformers builds a tokenizer from (save one with save_pretrained)"
                )
            if self.engine == "tiktoken":
                raise TokenizerError(
                    f"engine 'tiktoken' only serves GPT-2; use 'hf' or 'auto' for {self.name!r}"
                )
        text = chat_template_text(self)
        if text is not None:
            compiled_chat_template(text)  # a syntax error fails here, not at the first batch

    def build(self) -> Tokenizer:
        """The tokenizer, built once per process (a per-process cache, as kernels may keep) and
        again when a local tokenizer's files change. A local one that cannot be built is a
        :class:`TokenizerError` naming its path."""
        return _build(self.name, self.engine, self.threads)

    def identity(self) -> TokenizerIdentity:
        """What the built tokenizer would say about itself, without building GPT-2: the driver
        needs only this for shard footers, and building costs it ~20 MB and a third of a second
        (the workers build their own)."""
        if self.name == GPT2:
            return TokenizerIdentity(
                name=GPT2,
                engine="hf" if self.engine == "hf" else "tiktoken",
                fingerprint=_files_fingerprint(*gpt2_files()),
                vocab_size=GPT2_VOCAB_SIZE,
                eos_id=GPT2_EOS_ID,
                pad_id=GPT2_EOS_ID,
            )
        tok = self.build()
        return TokenizerIdentity(
            tok.name, tok.engine, tok.fingerprint, tok.vocab_size, tok.eos_id, tok.pad_id
        )


@dataclass(frozen=True)
class TokenizerIdentity:
    """A tokenizer's identity as recorded in shard footers (see :class:`Tokenizer`)."""

    name: str
    engine: str
    fingerprint: str
    vocab_size: int
    eos_id: int | None
    pad_id: int


_local_builds: dict[tuple[str, str, int], tuple[tuple, Tokenizer]] = {}
"""(name, engine, threads) -> (its sources' :func:`_files_state` when built, the tokenizer), the
most recently used last."""


def _build(name: str, engine: str, threads: int) -> Tokenizer:
    """The tokenizer from a per-process cache. GPT-2's files belong to an installed package; a
    local tokenizer is built again once one of its sources is written, replaced, added or removed,
    so a later run in the same process (API or notebook use) never keeps an earlier version's ids
    and fingerprint, nor with them reuses the shards that version tokenized. Checking costs a
    stat per source."""
    if name == GPT2:
        return _build_gpt2(engine, threads)
    key = (name, engine, threads)
    cached = _local_builds.pop(key, None)
    if cached is None or cached[0] != _files_state(cached[1].sources):
        tok = _hf_local(Path(name))
        cached = (_files_state(tok.sources), tok)
    _local_builds[key] = cached
    while len(_local_builds) > _LOCAL_CACHE_SIZE:
        del _local_builds[next(iter(_local_builds))]
    return cached[1]


@lru_cache(maxsize=4)
def _build_gpt2(engine: str, threads: int) -> Tokenizer:
    if engine in ("auto", "tiktoken"):
        return _gpt2_tiktoken(threads)
    return _gpt2_hf()


def _files_state(paths: Iterable[str]) -> tuple[tuple[int, int, int, int] | None, ...]:
    """Size, mtime, ctime and inode of each file, None for one that is absent: a file written,
    replaced or restored from a backup changes at least one of them, and a stat reads none of
    its bytes."""
    state: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            state.append(None)
        else:
            state.append((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return tuple(state)
