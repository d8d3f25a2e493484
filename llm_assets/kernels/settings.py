"""How a spec's fields become run-config settings, declared beside the specs without Dagster.

A frozen spec dataclass declares its settings: each field's type, default, refusals (in
``__post_init__``) and description (``field(metadata={DOC: ...})``; a ``str`` field may name
its allowed values with ``metadata={CHOICES: (...)}``). Where a run-config value differs in form
from its spec field, a :class:`Form` says how. :mod:`llm_assets.assets.config` makes the
``dg.Config`` from them.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DOC = "doc"
"""Field metadata key of a setting's description, shown in the Dagster UI."""
CHOICES = "choices"
"""Field metadata key of a ``str`` setting's allowed values (its config type is their Literal)."""

SPEC_DEFAULT: Any = object()
"""Marks a :class:`Form` without a default of its own."""


@dataclass(frozen=True)
class Form:
    """How a run-config value differs in form from its spec field; None: as the spec says."""

    type: Any = None
    """The config's type (None: derived from the spec field's type)."""
    default: Any = SPEC_DEFAULT
    """The config's default (unset: the spec field's default, in config form)."""
    default_factory: Callable[[], Any] | None = None
    """Makes the config's default instead (a nested config, say)."""
    to_spec: Callable[[Any], Any] | None = None
    """The config value (a nested config as it is) -> the spec's value (None: the generic one)."""
