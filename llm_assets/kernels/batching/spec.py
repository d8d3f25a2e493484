"""How documents become training sequences (:class:`BatchSpec`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_assets.kernels.batching.bucketing import check_boundaries
from llm_assets.kernels.batching.checks import (
    _check_buckets,
    _check_fraction,
    _check_seed,
    _check_seq_len,
    _is_int,
)
from llm_assets.kernels.mixing.augment import AUGMENTS, check_augment_rate
from llm_assets.kernels.mixing.balance import BALANCES
from llm_assets.kernels.mixing.mixture import MixtureSpec

LAYOUTS = ("packed", "padded", "bucketed")
OVERFLOWS = ("split", "truncate")
PAD_TO = ("seq_len", "longest")


@dataclass(frozen=True)
class BatchSpec:
    """How documents become training sequences. Frozen and picklable: it travels to workers.

    Layouts:

    ``packed``
        Documents joined with EOS into blocks of exactly ``seq_len`` tokens, padding-free except
        the last block of each file. ``overflow="split"`` (default) lets a long document continue
        in the next block; ``"truncate"`` cuts every document to ``seq_len - 1`` tokens (plus its
        EOS) so none spans more than two blocks and none is longer than a block.
        ``drop_remainder`` drops the final partial block instead of padding it.
    ``padded``
        One document per sequence, truncated to ``seq_len`` and padded to ``seq_len``
        (``pad_to="seq_len"``) or to the longest document of its group of ``batch_size``
        consecutive sequences (``pad_to="longest"``).
    ``bucketed``
        One document per sequence, grouped by length: each document goes to the first length
        bucket whose upper bound holds it (``bucket_boundaries``, or boundaries derived from the
        length distribution by the stage), batches of ``batch_size`` are formed inside a bucket
        and padded to their longest document, and the batches are put in a seeded random order.
    """

    layout: str = field(
        default="packed",
        metadata={
            "choices": LAYOUTS,
            "doc": "packed: EOS-joined fixed blocks, padding-free; padded: one document per "
            "sequence with attention mask and labels; bucketed: padded within length buckets",
        },
    )
    seq_len: int = field(
        default=1024, metadata={"doc": "Tokens per sequence (the maximum for padded layouts)"}
    )
    seed: int = field(
        default=0, metadata={"doc": "Seed of the shuffle, the split and the batch order"}
    )
    validation_fraction: float = field(
        default=0.05, metadata={"doc": "Share of documents in validation"}
    )
    shuffle_buckets: int = field(
        default=1,
        metadata={
            "doc": "Minimum shuffle buckets (files per split); more when one would hold "
            "over 8 MB of token ids"
        },
    )
    drop_remainder: bool = field(
        default=False, metadata={"doc": "packed: drop the last partial block"}
    )
    overflow: str = field(
        default="split",
        metadata={
            "choices": OVERFLOWS,
            "doc": "packed: long documents continue in the next block, or are cut",
        },
    )
    pad_to: str = field(
        default="seq_len",
        metadata={
            "choices": PAD_TO,
            "doc": "padded: pad to seq_len or to the longest of each batch",
        },
    )
    batch_size: int = field(
        default=8, metadata={"doc": "Sequences per batch (pad_to=longest, bucketed)"}
    )
    bucket_boundaries: tuple[int, ...] | None = field(
        default=None,
        metadata={"doc": "bucketed: upper token bounds of the length buckets (default: derived)"},
    )
    """Upper bounds (tokens) of the length buckets for ``bucketed``; ``seq_len`` closes the last."""
    length_buckets: int = field(
        default=16, metadata={"doc": "bucketed: buckets derived from the lengths"}
    )
    """How many length buckets to derive from the length distribution (evenly spaced quantiles)
    when ``bucket_boundaries`` is not given."""
    balance: str = field(
        default="none",
        metadata={
            "choices": BALANCES,
            "doc": "Labelled data (filtered_documents' label_field): even out the classes of "
            "the train split. oversample: repeat documents of the smaller classes up to the "
            "largest; undersample: keep as many of each class as the smallest has (the rest are "
            "rejects, 'undersampled'). Validation is left as it is",
        },
    )
    """Labelled documents only: even out the classes of the train split (:func:`balance_quotas`).
    ``oversample`` repeats documents of the smaller classes up to the largest class;
    ``undersample`` keeps of every class as many documents as the smallest class has. The
    validation split is left as it is, so it measures the data as it comes."""
    max_copies: int | None = field(
        default=None,
        metadata={
            "doc": "oversample: at most this many times each document (itself included; "
            "times augment_copies + 1 with augment); a class that would need more stays "
            "smaller. Null: no cap"
        },
    )
    """``oversample``: at most this many times each document (itself included; ``augment_copies``
    multiplies it); a class that would need more stays smaller. None: as many as the largest
    class needs."""
    augment: str = field(
        default="none",
        metadata={
            "choices": AUGMENTS,
            "doc": "eda: every copy of a train document (balance: oversample, "
            "augment_copies) is a variant of it, one seeded word edit (deletion, swap or "
            "insertion of about augment_rate of its words), not the same tokens again. Plain "
            "documents only (not SFT or chat rows); validation is never augmented",
        },
    )
    """``eda``: every copy of a train document the batches make (``balance: oversample``,
    ``augment_copies``) is a variant of it, a seeded word edit
    (:mod:`llm_assets.kernels.mixing.augment`), rather than the same tokens again. The document
    itself is never changed."""
    augment_copies: int = field(
        default=0,
        metadata={
            "doc": "augment: eda: this many variants of every train document besides "
            "itself (after the balance, whose counts they multiply)"
        },
    )
    """``augment: eda``: this many more variants of every train document (after the balance,
    whose counts it multiplies by ``augment_copies + 1``: the classes stay as even)."""
    augment_rate: float = field(
        default=0.1,
        metadata={"doc": "augment: eda: share of a copy's words its edit changes (0-0.5]"},
    )
    """``augment: eda``: the share of a copy's words one edit changes (EDA's alpha)."""
    mixture: MixtureSpec | None = field(
        default=None,
        metadata={
            "doc": "The train split made of several sources in given proportions (by tokens "
            "or documents), its documents kept, left out or repeated; validation is left as it "
            "is"
        },
    )
    """The sources of the train split and their weights
    (:mod:`llm_assets.kernels.mixing.mixture`): each source's documents kept, left out or repeated
    until the sources stand in those proportions. None: every document once. Not with
    ``balance`` (both choose each document's copies)."""

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        _check_seq_len(self.seq_len)
        _check_seed(self.seed)
        _check_fraction(self.validation_fraction)
        _check_buckets(self.shuffle_buckets, "shuffle_buckets")
        if not isinstance(self.drop_remainder, bool):
            raise ValueError(f"drop_remainder must be a bool, got {self.drop_remainder!r}")
        if self.overflow not in OVERFLOWS:
            raise ValueError(f"overflow must be one of {OVERFLOWS}, got {self.overflow!r}")
        if self.pad_to not in PAD_TO:
            raise ValueError(f"pad_to must be one of {PAD_TO}, got {self.pad_to!r}")
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not _is_int(self.length_buckets) or not 1 <= self.length_buckets <= 256:
            raise ValueError(
                f"length_buckets must be an int in [1, 256], got {self.length_buckets}"
            )
        if self.bucket_boundaries == ():
            raise ValueError(
                "bucket_boundaries must hold at least one bound, or be null to derive them"
            )
        if self.bucket_boundaries is not None:
            check_boundaries(self.bucket_boundaries, self.seq_len)
        if self.balance not in BALANCES:
            raise ValueError(f"balance must be one of {BALANCES}, got {self.balance!r}")
        if self.max_copies is not None:
            if not _is_int(self.max_copies) or self.max_copies < 1:
                raise ValueError(f"max_copies must be an int >= 1, got {self.max_copies!r}")
            if self.balance != "oversample" and self.mixture is not None:
                raise ValueError(
                    "max_copies caps the copies of balance 'oversample', and balance is "
                    f"{self.balance!r}: to cap the copies of a mixture, set mixture.max_copies "
                    "instead"
                )
            if self.balance != "oversample":
                raise ValueError(
                    f"max_copies caps the copies of balance 'oversample', but balance is "
                    f"{self.balance!r}: unset max_copies or set balance: oversample"
                )
        if self.augment not in AUGMENTS:
            raise ValueError(f"augment must be one of {AUGMENTS}, got {self.augment!r}")
        if not _is_int(self.augment_copies) or self.augment_copies < 0:
            raise ValueError(f"augment_copies must be an int >= 0, got {self.augment_copies!r}")
        check_augment_rate(self.augment_rate)
        if self.augment == "none" and self.augment_copies:
            raise ValueError(
                f"augment_copies is {self.augment_copies} but augment is 'none': the copies "
                "would be the same tokens again, which is reading the batches for another "
                "epoch. Set augment: eda for varied copies, or unset augment_copies"
            )
        if self.mixture is not None and not isinstance(self.mixture, MixtureSpec):
            raise ValueError(f"mixture must be a MixtureSpec or None, got {self.mixture!r}")
        if self.mixture is not None and self.balance != "none":
            raise ValueError(
                f"mixture and balance {self.balance!r} both choose how many times each train "
                "document is held (the sources' shares, the classes' counts), and one would undo "
                "the other: set balance: none, or leave mixture.sources empty"
            )
        oversampled = self.balance == "oversample" or (
            self.mixture is not None and self.mixture.mode == "oversample"
        )
        if self.augment != "none" and not self.augment_copies and not oversampled:
            raise ValueError(
                f"augment is {self.augment!r}, but this config makes no copy to vary: set "
                "augment_copies (variants of every train document), balance: oversample "
                "(variants of the smaller classes' copies) or mixture.mode: oversample "
                "(variants of the smaller sources' copies)"
            )
