"""The filters of ``filtered_documents``, in chain order: the built-ins, then the plugins of the
entry-point group ``llm_assets.filters``, then the dedup annotation (which must see only the
documents every other filter kept).

Order of the built-ins: token-count bounds, the class label, the Gopher quality rules but the
stop-word rule, the Gopher repetition rules, flagged words, language, the stop-word rule, and
decontamination. The cheap, language-neutral rules come first, so the costly language model sees
fewer documents; the English stop-word rule comes after language, so a French paragraph is
rejected as ``wrong_language``, not as ``too_few_stop_words``. Each step sees only the rows the
previous ones kept, so every row is rejected once, for the first reason that applies.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

from llm_assets.kernels.filters.base import Filter
from llm_assets.kernels.filters.decontam import DecontamFilter
from llm_assets.kernels.filters.dedup import DedupAnnotation
from llm_assets.kernels.filters.flagged import FlaggedWordsFilter
from llm_assets.kernels.filters.gopher_quality import GopherQualityFilter
from llm_assets.kernels.filters.gopher_repetition import GopherRepetitionFilter
from llm_assets.kernels.filters.label import LabelFilter
from llm_assets.kernels.filters.language import LanguageFilter
from llm_assets.kernels.filters.length import LengthFilter
from llm_assets.kernels.filters.stop_words import StopWordsFilter

ENTRY_POINT_GROUP = "llm_assets.filters"
BUILTINS: tuple[type[Filter], ...] = (
    LengthFilter,
    LabelFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
    FlaggedWordsFilter,
    LanguageFilter,
    StopWordsFilter,
    DecontamFilter,
)
LAST: tuple[type[Filter], ...] = (DedupAnnotation,)


@functools.cache
def plugins() -> dict[type[Filter], str]:
    """Each plugin's filter class and the version of the distribution that ships it, sorted by
    name. A plugin whose name or run-config key a filter already has is refused."""
    taken = {f.name for f in BUILTINS + LAST} | {
        key for f in BUILTINS + LAST for key in (f.config_key, *f.slots()) if key
    }
    found: dict[type[Filter], str] = {}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        cls = point.load()
        if not (isinstance(cls, type) and issubclass(cls, Filter)):
            raise TypeError(
                f"entry point {point.name!r} of {ENTRY_POINT_GROUP} is {cls!r}, not a Filter class"
            )
        if cls.config_key is None or {cls.name, cls.config_key} & taken:
            raise ValueError(
                f"filter plugin {point.value}: its name {cls.name!r} and config key "
                f"{cls.config_key!r} must be set and not those of another filter"
            )
        taken |= {cls.name, cls.config_key}
        found[cls] = point.dist.version if point.dist is not None else "unknown"
    return found


@functools.cache
def registry() -> tuple[type[Filter], ...]:
    """Every filter, in chain order."""
    return BUILTINS + tuple(plugins()) + LAST


def setting_of(reason: str) -> str:
    """The setting (under ``filtered_documents.config``) to change when ``reason`` takes every
    document. An unknown reason gets the quality rules', the filter of the most reasons."""
    owner = next((f for f in registry() if f.owns(reason)), GopherQualityFilter)
    return owner.setting_of(reason)
