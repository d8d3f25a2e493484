"""The filter protocol: what every step of ``filtered_documents``' chain is and declares.

A filter is a subclass of :class:`Filter` in a module of its own. It declares, once:

* ``name``: its key in :class:`~llm_assets.kernels.filters.chain.FilterSpec`, in the stage's
  config and fingerprint; ``config_key``: its key under ``filtered_documents.config`` in the run
  config (None: its settings sit at the top level, as ``min_tokens`` does);
* ``spec_type``: a frozen, picklable dataclass of its settings, whose fields carry their
  defaults, their run-config descriptions (:func:`describe`) and whose ``__post_init__`` refuses
  bad values: the Dagster config is built from it, not written again;
* ``reasons``: the reject reasons it gives, and ``hint``: the setting to change when it rejects
  every document;
* :meth:`Filter.apply`: Arrow table in, :class:`~llm_assets.kernels.schema.StageResult` out.

The registry (:mod:`llm_assets.kernels.filters.registry`) lists the built-ins and the plugins of
the entry-point group ``llm_assets.filters``; both are configured, fingerprinted and reported
alike.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

from llm_assets.kernels.schema import TEXT, StageResult
from llm_assets.kernels.words import Words

if TYPE_CHECKING:
    from llm_assets.kernels.filters.chain import FilterSpec

FILTER_STAGE = "filter"
"""The ``stage`` of every reject a filter gives."""
ROW = "__filter_row"
"""The column numbering the rows of a batch while the chain runs (:class:`SharedWords`)."""


def describe(help: str = "", *, config: bool = True) -> dict[str, Any]:
    """A spec field's metadata: its run-config description; ``config=False`` keeps it out of
    the run config (a setting only code sets). ``field(default=..., metadata=describe(...))``."""
    return {"help": help, "config": config}


@dataclass(frozen=True)
class Setting:
    """One run-config setting of a filter: key, JSON-like type, default and description."""

    name: str
    type: Any
    default: Any
    help: str = ""


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


def _config_type(annotation: Any) -> Any:
    """The run-config type of a spec field: a tuple of X is a list of X (Dagster config has no
    tuples)."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        return list[_config_type(args[0])] if len(args) == 2 and args[1] is Ellipsis else list
    if origin in (typing.Union, types.UnionType):
        args = tuple(_config_type(a) for a in typing.get_args(annotation))
        return typing.Union[args]  # noqa: UP007
    return annotation


def _config_value(value: Any) -> Any:
    return [_config_value(v) for v in value] if isinstance(value, tuple) else value


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
    """An ``enabled`` setting turns the filter on and off."""
    enabled_help: ClassVar[str] = ""
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

    # --- the run config ----------------------------------------------------------------------
    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        """Its run-config settings: ``enabled`` (with :attr:`switch`), then the spec's fields."""
        hints = typing.get_type_hints(cls.spec_type)
        out = [Setting("enabled", bool, cls.on_by_default, cls.enabled_help)] if cls.switch else []
        for f in dataclasses.fields(cls.spec_type):
            if not f.metadata.get("config", True) or (cls.switch and f.name == "enabled"):
                continue
            default = None if f.default is dataclasses.MISSING else _config_value(f.default)
            out.append(
                Setting(f.name, _config_type(hints[f.name]), default, f.metadata.get("help", ""))
            )
        return tuple(out)

    @classmethod
    def from_config(cls, values: Mapping[str, Any], inputs: Inputs) -> dict[str, Any]:
        """Its parts of the :class:`FilterSpec` from its run-config ``values`` (those of
        :meth:`settings`); the spec refuses bad ones."""
        if cls.switch and not values.get("enabled", cls.on_by_default):
            return dict.fromkeys(cls.slots())
        names = {f.name for f in dataclasses.fields(cls.spec_type)}
        given = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in values.items()
            if k in names and k != "enabled"
        }
        return {cls.name: cls.spec_type(**given)}
