"""The run config made from the kernels' specs (:mod:`llm_assets.assets.config`)."""

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import dagster as dg
import pydantic
import pytest

from llm_assets.assets import pipeline
from llm_assets.assets.config import config_class, to_spec
from llm_assets.constants import PIPELINE_JOB
from llm_assets.definitions import defs
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.ingest.read import IngestSpec
from llm_assets.kernels.mixing.mixture import MixtureSource, MixtureSpec
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.kernels.pii import PiiSpec
from llm_assets.kernels.settings import Form
from llm_assets.kernels.tokenize.spec import TokenizerSpec


@dataclass(frozen=True)
class _Inner:
    weight: float = field(metadata={"doc": "A weight"})
    tags: tuple[str, ...] = ("a",)


@dataclass(frozen=True)
class _Outer:
    """A spec with every form the builder converts."""

    mode: str = field(default="x", metadata={"choices": ("x", "y"), "doc": "The mode"})
    size: int = field(default=3, metadata={"doc": "A size"})
    bounds: tuple[tuple[int, float], ...] = ((2, 0.5), (10, 0.1))
    limit: int | None = None
    kind: str | None = field(default=None, metadata={"choices": ("p", "q")})
    inner: _Inner | None = None
    inners: tuple[_Inner, ...] = ()
    hidden: int = 7

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")


_OuterConfig = config_class(
    _Outer,
    exclude=("hidden",),
    keys={"limit": "max_items"},
    extra={"stage_only": (int, pydantic.Field(5, description="No spec holds it"))},
)


def test_a_generated_config_has_the_specs_defaults_types_and_descriptions():
    fields = _OuterConfig.model_fields
    assert _OuterConfig.__name__ == "_OuterConfig"
    assert set(fields) == {
        *("mode", "size", "bounds", "max_items", "kind", "inner", "inners", "stage_only")
    }
    assert fields["mode"].annotation == Literal["x", "y"]
    assert fields["kind"].annotation == Literal["p", "q"] | None
    assert fields["bounds"].annotation == dict[str, float]
    assert fields["bounds"].default == {"2": 0.5, "10": 0.1}
    assert fields["size"].description == "A size"
    assert fields["stage_only"].description == "No spec holds it"
    assert to_spec(_OuterConfig()) == _Outer()


def test_to_spec_converts_lists_dicts_and_nested_configs_to_the_specs_forms():
    config = _OuterConfig(
        mode="y",
        bounds={"10": 0.2, "3": 0.4},
        max_items=4,
        kind="q",
        inner={"weight": 2, "tags": ["p", "q"]},
        inners=[{"weight": 1.5}],
        stage_only=9,
    )
    spec = to_spec(config)
    assert spec == _Outer(
        mode="y",
        bounds=((3, 0.4), (10, 0.2)),
        limit=4,
        kind="q",
        inner=_Inner(weight=2.0, tags=("p", "q")),
        inners=(_Inner(weight=1.5),),
    )
    assert isinstance(spec.inner.tags, tuple) and spec.hidden == 7


def test_the_config_refuses_what_the_types_refuse_and_the_spec_what_it_refuses():
    with pytest.raises(pydantic.ValidationError, match="mode"):
        _OuterConfig(mode="z")
    with pytest.raises(pydantic.ValidationError, match="weight"):
        _OuterConfig(inners=[{}])  # a spec field without a default is required
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        to_spec(_OuterConfig(size=0))


def test_a_form_and_a_flattened_spec():
    config_type = config_class(
        NormalizeSpec,
        "StrippedNormalizeConfig",
        flatten=("pii",),
        keys={"pii.mode": "pii"},
        forms={"preset": Form(type=str, default="none", to_spec=str.strip)},
    )
    assert {"pii", "pii_kinds", "pii_max_density"} <= set(config_type.model_fields)
    spec = to_spec(config_type(preset=" ascii_lower ", pii="off"))
    assert spec == NormalizeSpec(preset="ascii_lower", pii=PiiSpec(mode="off"))
    assert to_spec(config_type()).preset == "none"


def _spec_default(spec_type: type, name: str):
    f = next(f for f in dataclasses.fields(spec_type) if f.name == name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


@pytest.mark.parametrize(
    ("config_type", "spec_type", "keys", "unset"),
    [
        (
            pipeline.RawDocumentsConfig,
            IngestSpec,
            {},
            {"batch_rows", "batch_bytes", "chat_answers"},
        ),
        (pipeline.TokenizeConfig, TokenizerSpec, {"name": "tokenizer"}, set()),
        (pipeline.BatchesConfig, BatchSpec, {}, {"mixture"}),
        (pipeline.MixtureConfig, MixtureSpec, {}, {"sources"}),
        (
            pipeline.MixtureConfig.model_fields["sources"].annotation.__args__[0],
            MixtureSource,
            {},
            set(),
        ),
    ],
)
def test_the_stages_configs_have_their_specs_defaults_and_descriptions(
    config_type, spec_type, keys, unset
):
    """Each spec field is a setting with the spec's default, in config form, and description
    (but those the stage's config gives another form, or that are not settings)."""
    for f in dataclasses.fields(spec_type):
        if f.name in unset:
            continue
        setting = config_type.model_fields[keys.get(f.name, f.name)]
        assert setting.description == f.metadata.get("doc")
        default = setting.get_default(call_default_factory=True)
        expected = _spec_default(spec_type, f.name)
        if expected is dataclasses.MISSING:
            assert setting.is_required()
        else:
            assert default == (list(expected) if isinstance(expected, tuple) else expected)


def test_the_stages_configs_build_the_specs_defaults():
    assert to_spec(pipeline.RawDocumentsConfig()) == IngestSpec()
    assert to_spec(pipeline.NormalizeConfig()) == NormalizeSpec(pii=PiiSpec())
    assert to_spec(pipeline.TokenizeConfig()) == TokenizerSpec()
    assert to_spec(pipeline.BatchesConfig()) == BatchSpec()
    assert to_spec(pipeline.RawDocumentsConfig(chat_field="m", chat_answers="every")) == (
        IngestSpec(chat_field="m", chat_answers="every")
    )


def test_the_jobs_config_schema_resolves_with_the_specs_descriptions():
    job = defs.resolve_job_def(PIPELINE_JOB)
    ops = job.run_config_schema.config_type.fields["ops"].config_type.fields
    batches = ops["training_batches"].config_type.fields["config"].config_type.fields
    assert batches["layout"].default_value == "packed"
    assert batches["layout"].description.startswith("packed: EOS-joined fixed blocks")
    mixture = batches["mixture"].config_type.fields
    assert mixture["mode"].description.startswith("undersample: no document more than once")
    raw = ops["raw_documents"].config_type.fields["config"].config_type.fields
    assert raw["chat_answers"].default_value == "last"
    assert raw["input_dir"].description.startswith("Folder of input files (read recursively)")
    normalize = ops["normalized_documents"].config_type.fields["config"].config_type.fields
    assert normalize["pii_max_density"].description == "reject mode: PII matches per word"
    result = dg.validate_run_config(
        job, {"ops": {"training_batches": {"config": {"layout": "bucketed", "seq_len": 64}}}}
    )
    assert result["ops"]["training_batches"]["config"]["seq_len"] == 64


@dataclass(frozen=True)
class _Switched:
    enabled: bool = field(default=True, metadata={"doc": "Run it"})
    size: int = field(default=3, metadata={"doc": "How many"})
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")


def test_a_switch_turns_the_spec_off_and_stands_for_its_enabled_field():
    config_type = config_class(_Switched, "SwitchedConfig", switch=False, doc="A switched spec")
    assert next(iter(config_type.model_fields)) == "enabled"
    assert config_type.model_fields["enabled"].description == "Run it"
    assert config_type.__doc__ == "A switched spec"
    assert to_spec(config_type()) is None
    assert to_spec(config_type(size=0)) is None  # off: the spec is not made, nor checks
    assert to_spec(config_type(enabled=True, names=["a"])) == _Switched(names=("a",))


def test_fields_the_caller_makes_are_not_converted():
    config_type = config_class(_Switched, "GivenConfig")
    spec = to_spec(config_type(names=["a"]), names=("b", "c"))
    assert spec == _Switched(names=("b", "c"))
