"""Dagster run config made from the kernels' specs, so each setting is declared once.

A kernel's frozen spec dataclass declares its settings (:mod:`llm_assets.kernels.settings`):
each field's type, default, refusals and description. :func:`config_class` makes the
``dg.Config`` a stage's asset (or a filter) takes from it, and :func:`to_spec` builds the spec
back from a run's config, so the spec's own constructor refuses a bad value and the Dagster UI
shows the spec's descriptions.

The config takes the spec's fields in the forms Dagster's config system accepts: a
``tuple[X, ...]`` is a list, a tuple of ``(key, value)`` pairs a dict keyed by strings, a nested
spec a nested config (or, named in ``flatten``, its fields at the top level). Where a run-config
value differs in form from its spec field beyond that, a :class:`Form` says how (its type,
default, and the conversion to the spec's value). A ``switch`` adds an ``enabled`` setting that
turns the spec off (:func:`to_spec` gives None).
"""

import dataclasses
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import dagster as dg
from pydantic import Field, create_model

from llm_assets.kernels.settings import CHOICES, DOC, SPEC_DEFAULT, Form

SWITCH = "enabled"
"""The key of a switched spec's on/off setting, and the spec field it stands for if it has one."""


@dataclass(frozen=True)
class _Setting:
    """One config key and the spec field it sets."""

    key: str
    field: str
    type: Any
    """The spec field's type, which the generic conversion to the spec follows."""
    to_spec: Callable[[Any], Any] | None
    nested: tuple["_Setting", ...] = ()
    """A flattened nested spec's settings (then ``key`` is unused)."""


@dataclass(frozen=True)
class _Binding:
    spec: type
    settings: tuple[_Setting, ...]
    switch: bool
    """An ``enabled`` setting turns the spec off."""


_BINDINGS: dict[type, _Binding] = {}
"""Generated config class -> the spec it builds and how."""
_NESTED: dict[type, type[dg.Config]] = {}
"""Spec class -> its generated config, when it is a field of another spec."""


def config_class(
    spec: type,
    name: str | None = None,
    *,
    exclude: Collection[str] = (),
    keys: Mapping[str, str] | None = None,
    flatten: Collection[str] = (),
    forms: Mapping[str, Form] | None = None,
    extra: Mapping[str, tuple[Any, Any]] | None = None,
    switch: bool | None = None,
    doc: str | None = None,
) -> type[dg.Config]:
    """A ``dg.Config`` subclass with a setting per field of the dataclass ``spec``.

    ``name``: the class's name (default: the spec's, ``Spec`` replaced by ``Config``);
    ``exclude``: spec fields that are not settings (they keep the spec's default); ``keys``: spec
    field -> its config key where they differ (``"nested.field"`` for a flattened spec's field,
    which is otherwise ``nested_field``); ``flatten``: nested-spec fields whose own fields are
    top-level settings; ``forms``: spec field (or ``"nested.field"``) -> :class:`Form`;
    ``extra``: stage-level settings that no spec holds, ``key -> (type, pydantic Field)``, read
    from the config by the stage itself and ignored by :func:`to_spec`; ``switch``: the default
    of a first setting ``enabled`` that turns the spec off (described by the spec's own
    ``enabled`` field, if it has one, which the switch then stands for); ``doc``: the class's
    description.
    """
    fields: dict[str, Any] = {}
    if switch is not None:
        own = {f.name: f for f in dataclasses.fields(spec)}.get(SWITCH)
        description = "Apply this filter (false: off)" if own is None else own.metadata.get(DOC)
        fields[SWITCH] = (bool, Field(switch, description=description))
        exclude = (*exclude, SWITCH)
    shape = _Shape(exclude, keys or {}, flatten, forms or {})
    settings = shape.settings(spec, "", fields)
    for key, definition in (extra or {}).items():
        fields[key] = definition
    model = create_model(name or _config_name(spec), __base__=dg.Config, __doc__=doc, **fields)
    _BINDINGS[model] = _Binding(spec, settings, switch is not None)
    return model


def to_spec(config: dg.Config, **given: Any) -> Any:
    """The spec ``config`` sets, made by the spec's constructor (which refuses a bad value);
    None when its switch is off. ``given``: spec fields whose values the caller makes itself
    from the config (their settings are then not converted)."""
    binding = next(_BINDINGS[cls] for cls in type(config).__mro__ if cls in _BINDINGS)
    if binding.switch and not getattr(config, SWITCH):
        return None
    return binding.spec(**_spec_kwargs(config, binding.settings, given))


def _spec_kwargs(
    config: dg.Config, settings: tuple[_Setting, ...], given: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(given or {})
    for setting in settings:
        if setting.field in kwargs:
            continue
        if setting.nested:
            kwargs[setting.field] = setting.type(**_spec_kwargs(config, setting.nested))
            continue
        value = getattr(config, setting.key)
        convert = setting.to_spec or (lambda v, tp=setting.type: _spec_value(tp, v))
        kwargs[setting.field] = convert(value)
    return kwargs


@dataclass(frozen=True)
class _Shape:
    """How a spec's fields become settings (:func:`config_class`'s arguments)."""

    exclude: Collection[str]
    keys: Mapping[str, str]
    flatten: Collection[str]
    forms: Mapping[str, Form]

    def settings(self, spec: type, prefix: str, out: dict[str, Any]) -> tuple[_Setting, ...]:
        """The settings of ``spec``'s fields (their paths start with ``prefix``); their pydantic
        field definitions go to ``out``, keyed by config key."""
        hints = typing.get_type_hints(spec)
        settings = []
        for field in dataclasses.fields(spec):
            path = prefix + field.name
            if path in self.exclude or not field.init:
                continue
            tp = hints[field.name]
            if path in self.flatten:
                nested = self.settings(tp, f"{path}.", out)
                settings.append(_Setting(path, field.name, tp, None, nested))
                continue
            key = self.keys.get(path, path.replace(".", "_"))
            form = self.forms.get(path, Form())
            out[key] = _definition(form, field, tp)
            settings.append(_Setting(key, field.name, tp, form.to_spec))
        return tuple(settings)


def _definition(form: Form, field: dataclasses.Field, tp: Any) -> tuple[Any, Any]:
    """The pydantic ``(type, Field)`` of the setting of ``field`` (of type ``tp``)."""
    config_type = form.type
    if config_type is None:
        choices = field.metadata.get(CHOICES)
        config_type = _config_type(tp)
        if choices:
            config_type = (
                Literal[tuple(choices)] | None if _optional(tp) else Literal[tuple(choices)]
            )
    doc = field.metadata.get(DOC)
    if form.default_factory is not None:
        return config_type, Field(default_factory=form.default_factory, description=doc)
    default = form.default
    if default is SPEC_DEFAULT:
        default = _config_default(tp, field)
    return config_type, Field(default, description=doc)


def _config_name(spec: type) -> str:
    return spec.__name__.removesuffix("Spec") + "Config"


def _nested_config(spec: type) -> type[dg.Config]:
    if spec not in _NESTED:
        _NESTED[spec] = config_class(spec)
    return _NESTED[spec]


def _optional(tp: Any) -> Any:
    """``X`` of ``X | None``, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def _pair(tp: Any) -> tuple[Any, Any] | None:
    """``(K, V)`` when ``tp`` is ``tuple[tuple[K, V], ...]`` (a mapping's items), else None."""
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis and typing.get_origin(args[0]) is tuple:
            inner = typing.get_args(args[0])
            if len(inner) == 2 and Ellipsis not in inner:
                return inner[0], inner[1]
    return None


def _config_type(tp: Any) -> Any:
    """The type a run config holds for a spec field of type ``tp``."""
    inner = _optional(tp)
    if inner is not None:
        return _config_type(inner) | None
    if dataclasses.is_dataclass(tp):
        return _nested_config(tp)
    pair = _pair(tp)
    if pair is not None:
        return dict[str, _config_type(pair[1])]
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[1:] == (Ellipsis,):
        return list[_config_type(typing.get_args(tp)[0])]
    return tp


def _config_default(tp: Any, field: dataclasses.Field) -> Any:
    """The spec field's default in config form; ``...`` (required) when it has none."""
    if field.default is not dataclasses.MISSING:
        return _config_value(tp, field.default)
    if field.default_factory is not dataclasses.MISSING:
        return _config_value(tp, field.default_factory())
    return ...


def _config_value(tp: Any, value: Any) -> Any:
    """A spec value in config form (the inverse of :func:`_spec_value`)."""
    if value is None:
        return None
    tp = _optional(tp) or tp
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return _nested_config(tp)(
            **{
                f.name: _config_value(hints[f.name], getattr(value, f.name))
                for f in dataclasses.fields(tp)
                if f.init
            }
        )
    if _pair(tp) is not None:
        return {str(k): _config_value(_pair(tp)[1], v) for k, v in value}
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[1:] == (Ellipsis,):
        return [_config_value(typing.get_args(tp)[0], v) for v in value]
    return value


def _spec_value(tp: Any, value: Any) -> Any:
    """A config value in the spec's form: lists become tuples, dicts tuples of (key, value)
    pairs sorted by key (converted to the spec's key type), nested configs their specs."""
    if value is None:
        return None
    tp = _optional(tp) or tp
    if isinstance(value, dg.Config):
        return to_spec(value)
    pair = _pair(tp)
    if pair is not None:
        key_type, value_type = pair
        return tuple(sorted((key_type(k), _spec_value(value_type, v)) for k, v in value.items()))
    if typing.get_origin(tp) is tuple and typing.get_args(tp)[1:] == (Ellipsis,):
        return tuple(_spec_value(typing.get_args(tp)[0], v) for v in value)
    return value
