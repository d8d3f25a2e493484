"""Source mixtures: the train split made of several sources in given proportions.

A fine-tuning set is often several data sets at once (an instruction set, a code set, a slice of
web text), and how much of each the model sees matters more than how much of each there happens
to be. Megatron-LM's blend weights, Hugging Face's ``interleave_datasets(probabilities=...)`` and
LLaMA-Factory's ``interleave_probs`` set it for sources read side by side; here the batches are
written once, so the proportions are made in them: ``training_batches``' ``mixture`` names each
source by the input files it holds and gives it a weight, and the train split keeps, repeats or
leaves out documents of each source until the sources stand in those proportions.

What is weighed (``by``) is the tokens of the documents (``tokens``: a source of long documents
weighs more per document) or the documents themselves (``documents``). The proportions are met
by choosing how many train documents of each source the batches hold (:func:`mixture_targets`):

``undersample``
    no document more than once: the source shortest of its share is kept whole, the others are
    cut down to their shares (the documents left out are rejects, with their reason);
``oversample``
    no document left out: the source most over its share is kept as it is, the others are
    repeated up to their shares (``max_copies`` caps the copies of a document; a source that
    would need more stays below its share).

The validation split is never mixed: it measures the data as it comes. Which documents are left
out or repeated is a seeded random choice (the same as the classes' balance,
:func:`~llm_assets.kernels.mixing.balance.balance_order`), so it depends only on the seed and
the documents' ids.

Pure: no Dagster, no file I/O. A document's source is found from its ``source_file`` (the path
of its input file relative to the input folder, :func:`source_of`).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

MIXTURE_MODES = ("oversample", "undersample")
MIXTURE_BASES = ("tokens", "documents")

MIXED_OUT = "mixture_undersampled"
"""Reject reason of a train document left out to bring its source down to its share of the
mixture (``mixture.mode: undersample``)."""


@dataclass(frozen=True)
class MixtureSource:
    """One source of a mixture: the input files it holds, by their path relative to the input
    folder (:func:`file_matches`), and its weight (relative: the weights need not sum to 1)."""

    name: str = field(metadata={"doc": "The source's name, in logs, rejects and metadata"})
    files: tuple[str, ...] = field(
        metadata={
            "doc": "Its input files: paths relative to raw_documents' input_dir, folders "
            "(every file below) or shell patterns over the path ('*' matches '/' too), e.g. "
            "['code/', '*.py.jsonl']. A file belongs to the first source that names it"
        }
    )
    weight: float = field(metadata={"doc": "Its weight (> 0; the weights need not sum to 1)"})


@dataclass(frozen=True)
class MixtureSpec:
    """The sources of the train split and how they are weighed (see the module's docstring).
    A document belongs to the first source, in the order given, whose ``files`` hold its input
    file; every input file must belong to one."""

    sources: tuple[MixtureSource, ...] = field(
        metadata={
            "doc": "The sources of the train split (at least two), each with its files and "
            "weight; every input file must belong to one. Empty: no mixture"
        }
    )
    by: Literal["tokens", "documents"] = field(
        default="tokens",
        metadata={"doc": "Weigh the sources by their documents' tokens, or by documents"},
    )
    mode: Literal["undersample", "oversample"] = field(
        default="undersample",
        metadata={
            "doc": "undersample: no document more than once, the sources over their share "
            "cut down (rejects 'mixture_undersampled'); oversample: no document left out, the "
            "sources under their share repeated"
        },
    )
    max_copies: int | None = field(
        default=None,
        metadata={
            "doc": "oversample: at most this many times each document (a source that would "
            "need more stays below its share). Null: no cap"
        },
    )

    def __post_init__(self) -> None:
        if len(self.sources) < 2:
            raise ValueError(
                f"mixture.sources holds {len(self.sources)} source(s): a mixture needs at "
                "least two (with one, every document is kept as it is); or leave sources empty "
                "for no mixture"
            )
        seen: set[str] = set()
        for source in self.sources:
            if not isinstance(source.name, str) or not source.name.strip():
                raise ValueError(f"mixture.sources: every source needs a name, got {source.name!r}")
            if source.name in seen:
                raise ValueError(f"mixture.sources: the name {source.name!r} is given twice")
            seen.add(source.name)
            if not source.files or not all(
                isinstance(f, str) and _normalized(f).rstrip("/") not in ("", ".")
                for f in source.files
            ):
                raise ValueError(
                    f"mixture source {source.name!r}: files must list at least one path or "
                    f"pattern of input files (relative to the input folder; '*' for every "
                    f"file), got {list(source.files)!r}"
                )
            weight = source.weight
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not math.isfinite(weight)
                or weight <= 0
            ):
                raise ValueError(
                    f"mixture source {source.name!r}: weight must be a number > 0, got {weight!r} "
                    "(to leave a source out, leave its files out of the input folder)"
                )
        if self.by not in MIXTURE_BASES:
            raise ValueError(f"mixture.by must be one of {MIXTURE_BASES}, got {self.by!r}")
        if self.mode not in MIXTURE_MODES:
            raise ValueError(f"mixture.mode must be one of {MIXTURE_MODES}, got {self.mode!r}")
        if self.max_copies is not None:
            if isinstance(self.max_copies, bool) or not isinstance(self.max_copies, int):
                raise ValueError(f"mixture.max_copies must be an int >= 1, got {self.max_copies!r}")
            if self.max_copies < 1:
                raise ValueError(f"mixture.max_copies must be an int >= 1, got {self.max_copies}")
            if self.mode != "oversample":
                raise ValueError(
                    "mixture.max_copies caps the copies of mode 'oversample', but mode is "
                    f"{self.mode!r}: unset max_copies or set mode: oversample"
                )

    @property
    def shares(self) -> dict[str, float]:
        """Each source's share of the train split, its weight over the weights' sum."""
        total = math.fsum(s.weight for s in self.sources)
        return {s.name: s.weight / total for s in self.sources}

    def source_of(self, source_file: str) -> str | None:
        """The name of the first source whose ``files`` hold ``source_file``; None if none."""
        for source in self.sources:
            if any(file_matches(pattern, source_file) for pattern in source.files):
                return source.name
        return None

    def sources_of(self, source_files: Sequence[str]) -> list[str | None]:
        """:meth:`source_of` of each of ``source_files`` (each distinct file matched once)."""
        known: dict[str, str | None] = {}
        for name in source_files:
            if name not in known:
                known[name] = self.source_of(name)
        return [known[name] for name in source_files]


def file_matches(pattern: str, source_file: str) -> bool:
    """Whether the input file ``source_file`` (its path relative to the input folder, with
    ``/``) is one of ``pattern``'s: the file itself, a folder holding it (``wiki`` or ``wiki/``:
    every file below), or a shell-style pattern over the whole path (``*.jsonl``, ``code/*``;
    ``*`` also matches ``/``, so ``code/*`` holds ``code/python/a.jsonl`` too). Case-sensitive.
    A leading ``./`` is ignored. ``**`` is two ``*``: ``**/*.jsonl`` needs a folder, write
    ``*.jsonl`` for every JSON Lines file."""
    pattern = _normalized(pattern)
    folder = pattern.rstrip("/")
    if source_file == folder or source_file.startswith(folder + "/"):
        return True
    return fnmatch.fnmatchcase(source_file, pattern)


def _normalized(pattern: str) -> str:
    """``pattern`` without surrounding spaces and leading ``./``."""
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:].lstrip("/")
    return pattern


def mixture_targets(
    documents: Mapping[str, int], amounts: Mapping[str, float], spec: MixtureSpec
) -> dict[str, int]:
    """How many train documents of each source the batches hold, from each source's train
    ``documents`` and its ``amounts`` (its documents' tokens, or its documents again, as
    ``spec.by`` says), so that the sources stand in ``spec``'s shares.

    A source of ``a`` tokens (or documents) that should weigh ``s * share`` is scaled by
    ``m = s * share / a``, and keeps ``round(m * documents)`` documents. ``s`` is the least
    (``undersample``: every ``m`` <= 1, the source shortest of its share keeps ``m = 1``) or the
    most (``oversample``: every ``m`` >= 1) the sources allow; ``max_copies`` caps ``m``. By
    tokens the documents kept are a seeded random choice, so the tokens meet the share as closely
    as their lengths allow (on average, exactly). Every source of ``spec`` must have train
    documents: the caller checks that, with a message naming the files."""
    shares = spec.shares
    missing = [name for name in shares if documents.get(name, 0) <= 0 or amounts.get(name, 0) <= 0]
    if missing:
        raise ValueError(f"mixture source(s) {missing} have no train document")
    ratios = [amounts[name] / shares[name] for name in shares]
    scale = min(ratios) if spec.mode == "undersample" else max(ratios)
    targets: dict[str, int] = {}
    for name, share in shares.items():
        multiple = scale * share / amounts[name]
        if spec.mode == "undersample":
            multiple = min(multiple, 1.0)  # rounding: the shortest source is kept whole
        else:
            multiple = max(multiple, 1.0)
            if spec.max_copies is not None:
                multiple = min(multiple, float(spec.max_copies))
        targets[name] = math.floor(multiple * documents[name] + 0.5)
    return targets
