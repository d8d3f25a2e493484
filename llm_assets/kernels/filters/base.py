"""The filter protocol: what every step of ``filtered_documents``' chain is and declares.

A filter is a subclass of :class:`Filter` in a module of its own. It declares, once:

* ``name``: its key in :class:`~llm_assets.kernels.filters.chain.FilterSpec`, in the stage's
  config and fingerprint; ``config_key``: its key under ``filtered_documents.config`` in the run
  config (None: its settings sit at the top level, as ``min_tokens`` does);
* ``spec_type``: a frozen, picklable dataclass of its settings, whose fields carry their
  defaults and run-config descriptions (``field(metadata={"doc": ...})``,
  :mod:`llm_assets.kernels.settings`) and whose ``__post_init__`` refuses bad values: the Dagster
  config is built from it (:mod:`llm_assets.assets.filter_config`), not written again;
  ``keys``, ``exclude``, ``flatten`` and ``forms`` say where its run-config block differs from
  the spec, and :meth:`Filter.from_config` makes the spec from a setting the spec does not hold;
* ``reasons``: the reject reasons it gives, and ``hint``: the setting to change when it rejects
  every document (default: its block, or ``enabled: false``);
* :meth:`Filter.apply`: Arrow table in, :class:`~llm_assets.kernels.schema.StageResult` out.

The registry (:mod:`llm_assets.kernels.filters.registry`) lists the built-ins and the plugins of
the entry-point group ``llm_assets.filters``; both are configured, fingerprinted and reported
alike.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from llm_assets.kernels.schema import TEXT, StageResult
from llm_assets.kernels.settings import Form
from llm_assets.kernels.words import Words

if TYPE_CHECKING:
    from llm_assets.kernels.filters.chain import FilterSpec

FILTER_STAGE = "filter"
"""The ``stage`` of every reject a filter gives."""
ROW = "__filter_row"
"""The column numbering the rows of a batch while the chain runs (:class:`SharedWords`)."""


Build = Callable[..., Any]
"""Makes a filter's spec from its run config: ``build(config, **fields) -> spec | None``."""


@dataclass(frozen=True)
class Inputs:
    """How a filter's run config reaches files, given by the caller so that the kernel knows no
    data root: ``resolve(path, setting)`` gives the path ``setting`` names, absolute with its links
    followed (a relative one against the working directory); ``input_files(folder)`` lists a
    folder's input files as ``(path, relative name)``, refusing links that lead out of the folder
    and the data root (:mod:`llm_assets.paths`)."""

    resolve: Callable[[str, str], Path]
    input_files: Callable[[Path], list[tuple[Path, str]]]


class SharedWords:
    """The words of the batch, split once for every step that reads words (Gopher quality,
    Gopher repetition, the stop-word rule, decontamination, MinHash): splitting and encoding
    them was a quarter of the chain's time when each step did it again. Built at the first step
    that asks, on the rows it sees; a later step, which sees fewer rows, gets the words of its
    rows (:meth:`Words.take`), found by the :data:`ROW` number each row carries through the
    chain."""

    def __init__(self) -> None:
        self.words: Words | None = None
        self.rows = np.zeros(0, np.int64)

    def __call__(self, table: pa.Table) -> Words:
        rows = table[ROW].to_numpy()
        if self.words is None:
            self.words = Words.of(table[TEXT])
        elif len(rows) != len(self.rows):  # steps only drop rows, in order: same count, same rows
            self.words = self.words.take(np.searchsorted(self.rows, rows))
        self.rows = rows
        return self.words


class Filter(ABC):
    """One step of the filter chain, built from its part of the
    :class:`~llm_assets.kernels.filters.chain.FilterSpec` (None: off, no step)."""

    name: ClassVar[str]
    config_key: ClassVar[str | None]
    spec_type: ClassVar[type]
    reasons: ClassVar[tuple[str, ...]] = ()
    hint: ClassVar[str] = ""
    """The setting to change (under ``filtered_documents.config``) when the filter rejects
    every document."""
    on_by_default: ClassVar[bool] = False
    switch: ClassVar[bool] = True
    """An ``enabled`` setting (default :attr:`on_by_default`) turns the filter on and off."""
    keys: ClassVar[Mapping[str, str]] = {}
    """Spec field -> its run-config key, where they differ."""
    exclude: ClassVar[tuple[str, ...]] = ()
    """Spec fields that are not settings (they keep the spec's default)."""
    flatten: ClassVar[tuple[str, ...]] = ()
    """Nested-spec fields whose own fields are settings of the filter's block."""
    forms: ClassVar[Mapping[str, Form]] = {}
    """Spec field -> how its run-config value differs in form (:class:`Form`)."""
    recorded_when_off: ClassVar[bool] = False
    """An off filter still enters the stage config (as None): true of the filters the first
    warehouses were written with, whose fingerprints carry them; a filter added since is left
    out when off, so adding one keeps every fingerprint."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec

    @abstractmethod
    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        """Keep the rows that pass, reject the others with their reason and measured value.
        ``words(table)`` gives the words of ``table``'s texts, split once for the chain."""

    # --- the chain ---------------------------------------------------------------------------
    @classmethod
    def slots(cls) -> tuple[str, ...]:
        """Its keys in :class:`FilterSpec` (one but for a filter made of two specs)."""
        return (cls.name,)

    @classmethod
    def default_parts(cls) -> dict[str, Any]:
        """Its parts when a :class:`FilterSpec` names none: off."""
        return dict.fromkeys(cls.slots())

    @classmethod
    def of(cls, spec: FilterSpec) -> Filter | None:
        """Its step in the chain of ``spec``, or None when it is off (no part, or a part whose
        ``enabled`` is false)."""
        part = spec.get(cls.name)
        return None if part is None or getattr(part, "enabled", True) is False else cls(part)

    @classmethod
    def stage_config(cls, parts: Mapping[str, Any]) -> dict[str, Any]:
        """Its part of the stage config and fingerprint: its settings (see
        :attr:`recorded_when_off`)."""
        out = {}
        for slot in cls.slots():
            part = parts.get(slot)
            if part is not None or cls.recorded_when_off:
                out[slot] = None if part is None else dataclasses.asdict(part)
        return out

    # --- the hint ----------------------------------------------------------------------------
    @classmethod
    def owns(cls, reason: str) -> bool:
        return reason in cls.reasons

    @classmethod
    def setting_of(cls, reason: str) -> str:
        """The setting to change when ``reason`` (one of its own) takes every document."""
        return cls.hint or f"{cls.config_key} (or enabled: false)"

    # --- the run config ---------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: Any, build: Build, inputs: Inputs) -> dict[str, Any]:
        """Its parts of the :class:`FilterSpec` from its run config ``config`` (made from
        :attr:`spec_type` as :attr:`keys`, :attr:`exclude`, :attr:`flatten`, :attr:`forms` and
        the switch say);
        ``build(config, **fields)`` makes the spec (None: switched off), which refuses bad
        values; ``fields``: spec values the filter makes itself from the config."""
        return {cls.name: build(config)}
