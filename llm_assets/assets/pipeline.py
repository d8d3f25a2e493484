"""The five pipeline assets: thin wrappers that read config and call :mod:`llm_assets.stages`."""

import re
from collections.abc import Collection, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from llm_assets.assets.config import config_class, to_spec
from llm_assets.assets.filter_config import FilterConfig, filter_spec
from llm_assets.assets.reporting.examples import sft_example_markdown
from llm_assets.assets.reporting.result import materialize_result
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import (
    CATALOG_POOL,
    DEFAULT_INPUT_DIR,
    FILTERED_DOCUMENTS,
    GROUP_NAME,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    ROWS_REJECTED_CHECK,
    STAGE_CODE_VERSIONS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.decontam import DecontamSpec
from llm_assets.kernels.ingest.read import IngestSpec
from llm_assets.kernels.mixing.mixture import MixtureSpec
from llm_assets.kernels.normalize import NormalizeSpec
from llm_assets.kernels.settings import Form
from llm_assets.kernels.tokenize.gpt2 import GPT2
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.orchestration.console import InputFailure
from llm_assets.orchestration.summary import last_step, run_summary
from llm_assets.paths import PathEscapeError, shown
from llm_assets.stages.engine import StageContext, StageInputError
from llm_assets.stages.filtered_documents.driver import run_filtered_documents
from llm_assets.stages.normalized_documents import run_normalized_documents
from llm_assets.stages.raw_documents import (
    DEFAULT_ROWS_PER_SHARD,
    list_input_files,
    run_raw_documents,
)
from llm_assets.stages.tokenized_documents import run_tokenized_documents, tokenizer_metadata
from llm_assets.stages.training_batches.checks import (
    MIXTURE_WITHOUT_MEGATRON,
    _eos_id,
    augment_without_megatron,
    augment_without_prompts,
    balance_needs_labels,
    balance_without_megatron,
    label_needs_a_padded_layout,
)
from llm_assets.stages.training_batches.driver import run_training_batches
from llm_assets.storage import StorageError, is_remote, local_path
from llm_assets.warehouse.catalog import CatalogLockedError, CatalogUnreadableError
from llm_assets.warehouse.resource import WarehouseConfigError, WarehouseResource

RawDocumentsConfig = config_class(
    IngestSpec,
    "RawDocumentsConfig",
    exclude=("batch_rows", "batch_bytes"),
    forms={
        # 'last' (the default) is the spec's None.
        "chat_answers": Form(
            type=Literal["last", "every", "all"],
            default="last",
            to_spec=lambda answers: None if answers == "last" else answers,
        )
    },
    extra={
        "input_dir": (
            str,
            Field(
                DEFAULT_INPUT_DIR,
                description=(
                    "Folder of input files (read recursively): a local path, or an "
                    "object-storage prefix such as s3://bucket/prefix (any fsspec URL; "
                    "credentials from the environment, never from run config)"
                ),
            ),
        ),
        "rows_per_shard": (
            int,
            Field(
                DEFAULT_ROWS_PER_SHARD,
                description=(
                    "Rows per shard, the unit of work, parallelism and restart: plain JSONL files "
                    "are cut into ranges of this many lines and Parquet files into ranges of "
                    "whole row groups when read; any other file is read whole, and the next "
                    "stage cuts it into parts of whole row groups (8,192 rows each, fewer for "
                    "large documents) of at most this many"
                ),
            ),
        ),
    },
)

NormalizeConfig = config_class(
    NormalizeSpec, "NormalizeConfig", flatten=("pii",), keys={"pii.mode": "pii"}
)
"""The PII settings are top-level keys: ``pii`` (the mode), ``pii_kinds``, ``pii_max_density``."""

TokenizeConfig = config_class(TokenizerSpec, "TokenizeConfig", keys={"name": "tokenizer"})


def _mixture_or_none(config: dg.Config) -> MixtureSpec | None:
    """The mixture of ``config``, or None when it names no source."""
    if not config.sources:
        if config.max_copies is not None:
            raise ValueError("mixture.max_copies is set but mixture.sources is empty")
        return None
    return to_spec(config)


# No source (the default) is no mixture: see _mixture_or_none.
MixtureConfig = config_class(MixtureSpec, forms={"sources": Form(default=[])})

BatchesConfig = config_class(
    BatchSpec,
    "BatchesConfig",
    forms={
        # An empty mixture (no source) is the spec's None.
        "mixture": Form(type=MixtureConfig, default_factory=MixtureConfig, to_spec=_mixture_or_none)
    },
    extra={
        "zstd_level": (int, Field(3, description="ZSTD level of the batch files (1-22)")),
        "megatron": (
            bool,
            Field(
                False,
                description="Also write a Megatron-LM indexed dataset (.bin/.idx) per split",
            ),
        ),
    },
)


def _check(asset: str) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            ROWS_REJECTED_CHECK,
            asset=asset,
            description="rows in = rows out + rows rejected, and rows in = upstream rows out",
        )
    ]


def _context(
    context: dg.AssetExecutionContext, compute: ComputeResource, warehouse: WarehouseResource
) -> StageContext:
    catalog = warehouse.catalog()
    compute.use_warehouse_catalog(str(catalog.path))
    return StageContext(
        warehouse_root=warehouse.location,
        catalog=catalog,
        compute=compute,
        log=context.log,
        run_id=context.run.run_id,
        backend=compute.backend,
    )


_INPUT_ERRORS = (
    StageInputError,
    PathEscapeError,
    CatalogLockedError,
    CatalogUnreadableError,
    StorageError,
    WarehouseConfigError,
)
"""Errors whose message names the fix (a setting, a folder, a file): the run fails with an
:class:`InputFailure` of that message, which the console prints without a stack."""


@contextmanager
def _stage(
    context: dg.AssetExecutionContext, compute: ComputeResource, warehouse: WarehouseResource
) -> Iterator[StageContext]:
    """Around an asset's body: check the run's config (:func:`validate_run_config`), give the
    stage's context, turn an input error into an :class:`InputFailure`, and, in the run's last
    step, log the ``Run summary`` once the stage is recorded. The whole step (stage, its
    metadata, the summary) uses one catalog connection (:meth:`Catalog.session`), not one per
    read or write: opening the file costs ~11-16 ms."""
    with ExitStack() as session:
        try:
            steps = run_steps(context)
            validate_run_config(context.run.run_config, warehouse.data_root_path, steps)
            ctx = _context(context, compute, warehouse)
            session.enter_context(ctx.catalog.session())
            yield ctx
        except _INPUT_ERRORS as exc:
            raise InputFailure(_with_working_directory(str(exc))) from exc
        if context.op_def.name == last_step(steps):
            summary = run_summary(ctx.catalog, warehouse.location, context.run.run_id, steps)
            context.log.info(summary)


_NAMES_A_PATH = re.compile(r"\b(folder|file|path|directory)s?\b")


def _with_working_directory(message: str) -> str:
    """``message``, and when it is about a file or folder, the working directory relative paths
    were resolved against."""
    cwd = str(Path.cwd())
    if cwd in message or not _NAMES_A_PATH.search(message):
        return message
    return f"{message} (working directory: {cwd})"


def _asset_kwargs(name: str) -> dict[str, Any]:
    return {
        "group_name": GROUP_NAME,
        "kinds": {"parquet", "duckdb"},
        "code_version": STAGE_CODE_VERSIONS[name],
        "pool": CATALOG_POOL,
        "check_specs": _check(name),
    }


def validate_run_config(
    run_config: dict[str, Any] | None, data_root: Path, steps: Collection[str] | None = None
) -> None:
    """Turn every step's config into its spec. Every asset calls this first, so whichever step
    a run starts with, a bad setting of any of its steps fails the run there, before any shard
    is computed, with a message naming the op and the setting. (Dagster checks only the
    settings' types when the run starts; a step left out of the run has no config in it and is
    checked with its defaults.)

    With ``training_batches`` among ``steps`` (the run's assets, :func:`run_steps`; None: all),
    the tokenizer must also have the EOS token that step's layout needs (:func:`_check_eos`),
    and a ``label_field`` needs a layout with a label column (``padded`` or ``bucketed``; a
    ``packed`` block joins documents and would drop every label); ``balance`` needs a
    ``label_field`` (when the run filters too) and no Megatron export; ``augment`` no Megatron
    export and (when the run tokenizes too) no prompt or chat template. A run without that step is
    not held to its defaults there: it cannot even carry its config (``training_batches`` checks
    its input for a ``label`` column itself).

    With ``raw_documents`` among ``steps``, no eval file of ``decontaminate`` may also be one of
    its input files (:func:`_check_eval_sets_are_not_input`).

    The same builders as the assets', so nothing is checked twice in two ways. Cheap for the
    defaults: GPT-2 is not built, only a custom flagged-word list is read (once per process),
    and a local tokenizer is built once per process while its files are unchanged. Raises
    :class:`~llm_assets.stages.engine.StageInputError`.
    """
    ops = (run_config or {}).get("ops") or {}

    def op_config(op: str) -> dict[str, Any]:
        return (ops.get(op) or {}).get("config") or {}

    with _config_errors(RAW_DOCUMENTS):
        raw_config = RawDocumentsConfig(**op_config(RAW_DOCUMENTS))
        ingest = to_spec(raw_config)
    with _config_errors(NORMALIZED_DOCUMENTS):
        to_spec(NormalizeConfig(**op_config(NORMALIZED_DOCUMENTS)))
    with _config_errors(TOKENIZED_DOCUMENTS):
        tokenizer = tokenizer_spec(TokenizeConfig(**op_config(TOKENIZED_DOCUMENTS)))
    with _config_errors(FILTERED_DOCUMENTS):
        filters = filter_spec(FilterConfig(**op_config(FILTERED_DOCUMENTS)), data_root)
    with _config_errors(TRAINING_BATCHES):
        batches_config = BatchesConfig(**op_config(TRAINING_BATCHES))
        batches = _batch_spec(batches_config)
    if filters.decontam is not None and (steps is None or RAW_DOCUMENTS in steps):
        _check_eval_sets_are_not_input(filters.decontam, raw_config.input_dir, data_root)
    both = {RAW_DOCUMENTS, TOKENIZED_DOCUMENTS}
    unprompted = tokenizer.chat_template is None and tokenizer.prompt_template is None
    if (steps is None or both <= steps) and ingest.chat_field is not None and unprompted:
        raise StageInputError(
            f"{RAW_DOCUMENTS}.config.chat_field is {ingest.chat_field!r} but "
            f"{TOKENIZED_DOCUMENTS}.config.chat_template is not set: each answer would be "
            "tokenized without the conversation before it (and learned as if unprompted). "
            "Set chat_template: chatml, tokenizer (the tokenizer folder's own template) or "
            "a Jinja chat template"
        )
    if steps is None or TRAINING_BATCHES in steps:
        _check_eos(tokenizer, batches, megatron=batches_config.megatron)
        if filters.label is not None and batches.layout == "packed":
            raise StageInputError(label_needs_a_padded_layout(batches.layout))
        if batches.balance != "none" and batches_config.megatron:
            raise StageInputError(balance_without_megatron(batches.balance))
        labels_unset = filters.label is None and (steps is None or FILTERED_DOCUMENTS in steps)
        if batches.balance != "none" and labels_unset:
            raise StageInputError(balance_needs_labels(batches.balance))
        if batches.mixture is not None and batches_config.megatron:
            raise StageInputError(MIXTURE_WITHOUT_MEGATRON)
        if batches.augment != "none" and batches_config.megatron:
            raise StageInputError(augment_without_megatron(batches.augment))
        tokenizing = steps is None or TOKENIZED_DOCUMENTS in steps
        if batches.augment != "none" and tokenizing and not unprompted:
            raise StageInputError(augment_without_prompts(batches.augment))


def _check_eval_sets_are_not_input(decontam: DecontamSpec, input_dir: str, root: Path) -> None:
    """Refuse eval files that ``raw_documents`` also reads as input: their records would become
    training documents, the long ones rejected as ``contaminated`` (they hold their own n-grams)
    but those under ``min_ngram`` words kept, so a run would quietly train on part of the eval
    set. Only checked when the run ingests (else ``input_dir`` is not the one the documents came
    from); an input folder that cannot be listed is left to ``raw_documents`` to name, and so
    is one in object storage (eval files are local files: never among its objects)."""
    if is_remote(input_dir):
        return
    try:
        listed = list_input_files(local_path(input_dir), root)
        inputs = {path.resolve(): rel for path, rel in listed}
    except ValueError:  # StageInputError: raw_documents fails on it, with its own message
        return
    read = [(name, inputs[Path(path)]) for path, name in decontam.files if Path(path) in inputs]
    if read:
        listed = ", ".join(f"{name!r} (input file {rel!r})" for name, rel in read[:3])
        more = f" and {len(read) - 3} more" if len(read) > 3 else ""
        raise StageInputError(
            f"{FILTERED_DOCUMENTS}.config.decontaminate.paths: the eval file(s) {listed}{more} "
            f"are also read as input by {RAW_DOCUMENTS} (input_dir {shown(input_dir)}): their "
            f"records would be training documents, and those under min_ngram "
            f"({decontam.min_ngram}) words would be kept. Move the eval sets out of the input "
            "folder, or into a folder of it whose name starts with '_' or '.' (not read as input)"
        )


def run_steps(context: dg.AssetExecutionContext) -> frozenset[str]:
    """The steps (here: the assets) the run executes: those selected, or all of its job's."""
    keys = context.run.step_keys_to_execute
    if keys is None:
        keys = [node.name for node in context.job_def.nodes]
    return frozenset(keys)


def _check_eos(tokenizer: TokenizerSpec, batches: BatchSpec, *, megatron: bool) -> None:
    """Before any work, the check ``training_batches`` makes on its input's footer
    (:func:`~llm_assets.stages.training_batches.checks._eos_id`), made on the footer the tokenizer
    will write: else a tokenizer without EOS fails the last step, after tokenizing and filtering
    everything. A bare ``tokenizer.json`` is the usual cause: it names no special token's role,
    which the ``tokenizer_config.json`` that ``save_pretrained`` writes beside it does."""
    try:
        _eos_id(
            tokenizer_metadata(tokenizer),
            batches,
            megatron,
            sft=tokenizer.prompt_template is not None or tokenizer.chat_template is not None,
        )
    except StageInputError as exc:
        path = Path(tokenizer.name)
        if tokenizer.name == GPT2 or not path.is_file():
            raise
        folder = (
            f"its folder {str(path.parent)!r}, which holds one"
            if (path.parent / "tokenizer_config.json").is_file()
            else "a folder written by save_pretrained"
        )
        raise StageInputError(
            f"{exc}. {TOKENIZED_DOCUMENTS}: tokenizer {tokenizer.name!r} is a bare tokenizer "
            "file, which names no EOS (nor padding) token: transformers reads them from a "
            f"tokenizer_config.json; set tokenizer to {folder}"
        ) from exc


@contextmanager
def _config_errors(op: str) -> Iterator[None]:
    """Re-raise a bad setting found while building ``op``'s spec as a StageInputError that
    starts with the op's name (the spec's own message names the setting)."""
    try:
        yield
    except (ValueError, OSError) as exc:  # pydantic's ValidationError is a ValueError too
        raise StageInputError(f"{op}: {exc}") from exc


def tokenizer_spec(config: dg.Config) -> TokenizerSpec:
    """The tokenizer of ``tokenized_documents``. A tokenizer path is an input like any other,
    read where it is (:mod:`llm_assets.paths`): it must exist (the spec checks, on disk only). It
    is then built (once per process while its files are unchanged, and the driver needs it for the
    footers anyway), so a file transformers cannot read fails here, named, not at the first
    shard; GPT-2 ships with the package and is not built."""
    spec = to_spec(config)
    if spec.name != GPT2:
        spec.build()
    return spec


def _batch_spec(config: dg.Config) -> BatchSpec:
    """The layout of ``training_batches``; its ``zstd_level`` (the writer's, no spec's) checked."""
    if not 1 <= config.zstd_level <= 22:
        raise ValueError(f"zstd_level must be in [1, 22], got {config.zstd_level}")
    return to_spec(config)


@dg.asset(name=RAW_DOCUMENTS, **_asset_kwargs(RAW_DOCUMENTS))
def raw_documents(
    context: dg.AssetExecutionContext,
    config: RawDocumentsConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Every input file (JSONL, JSONL.gz/.zst, Parquet, CSV, TXT, Arrow), in a folder or an
    object-storage prefix, as one row per document, with a stable ``doc_id`` and its source file
    and line; unreadable records are rejects with a reason."""
    with _stage(context, compute, warehouse) as ctx:
        spec = to_spec(config)
        report = run_raw_documents(
            ctx, config.input_dir, spec, config.rows_per_shard, data_root=warehouse.data_root_path
        )
        return materialize_result(report, ctx.catalog, None)


@dg.asset(name=NORMALIZED_DOCUMENTS, deps=[RAW_DOCUMENTS], **_asset_kwargs(NORMALIZED_DOCUMENTS))
def normalized_documents(
    context: dg.AssetExecutionContext,
    config: NormalizeConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """The documents' text after a named normalization preset."""
    with _stage(context, compute, warehouse) as ctx:
        report = run_normalized_documents(ctx, to_spec(config))
        return materialize_result(report, ctx.catalog, RAW_DOCUMENTS, preset=config.preset)


@dg.asset(
    name=TOKENIZED_DOCUMENTS, deps=[NORMALIZED_DOCUMENTS], **_asset_kwargs(TOKENIZED_DOCUMENTS)
)
def tokenized_documents(
    context: dg.AssetExecutionContext,
    config: TokenizeConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Token ids (all of them, no truncation) and counts, with the tokenizer's name and
    vocabulary fingerprint in every shard's footer."""
    with _stage(context, compute, warehouse) as ctx:
        spec = tokenizer_spec(config)
        report = run_tokenized_documents(ctx, spec)
        sft = {}
        if spec.prompt_template is not None or spec.chat_template is not None:
            example = sft_example_markdown(report, spec.build())
            sft = {"sft_example": dg.MetadataValue.md(example)} if example else {}
        return materialize_result(
            report,
            ctx.catalog,
            NORMALIZED_DOCUMENTS,
            tokens_per_second=round(report.extra.get("tokens", 0) / max(report.seconds, 1e-9), 1),
            **sft,
        )


@dg.asset(name=FILTERED_DOCUMENTS, deps=[TOKENIZED_DOCUMENTS], **_asset_kwargs(FILTERED_DOCUMENTS))
def filtered_documents(
    context: dg.AssetExecutionContext,
    config: FilterConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """The documents that pass every filter; each dropped one is a reject with reason and value."""
    with _stage(context, compute, warehouse) as ctx:
        spec = filter_spec(config, warehouse.data_root_path)
        report = run_filtered_documents(ctx, spec)
        steps = ", ".join(step.name for step in spec.steps())  # the chain, plugins included
        return materialize_result(report, ctx.catalog, TOKENIZED_DOCUMENTS, filters=steps)


@dg.asset(name=TRAINING_BATCHES, deps=[FILTERED_DOCUMENTS], **_asset_kwargs(TRAINING_BATCHES))
def training_batches(
    context: dg.AssetExecutionContext,
    config: BatchesConfig,
    compute: ComputeResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    """Shuffled (seeded), split into train/validation by document, and packed (padding-free) or
    padded into fixed-length sequences; ZSTD Parquet with the tokenizer and layout in its schema
    metadata."""
    with _stage(context, compute, warehouse) as ctx:
        spec = _batch_spec(config)
        report = run_training_batches(ctx, spec, config.zstd_level, megatron=config.megatron)
        tokens = report.extra.get("tokens", 0)
        padding = report.extra.get("padding_tokens", 0)
        return materialize_result(
            report,
            ctx.catalog,
            FILTERED_DOCUMENTS,
            layout=config.layout,
            seq_len=config.seq_len,
            padding_fraction=round(padding / max(tokens + padding, 1), 6),
        )


PIPELINE_ASSET_DEFS = [
    raw_documents,
    normalized_documents,
    tokenized_documents,
    filtered_documents,
    training_batches,
]
