"""``training_batches``, driver side: check the config, scatter, plan the quotas and the gather,
export for Megatron, record, mark the folder complete."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from llm_assets import storage
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    RAW_DOCUMENTS,
    STAGE_CODE_VERSIONS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.batching.bucketing import derive_boundaries
from llm_assets.kernels.batching.metadata import batch_schema_metadata, length_histogram
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.balance import LabelQuota
from llm_assets.kernels.schema import INPUT_IDS, LABEL, PROMPT_TOKENS
from llm_assets.stages.engine import (
    SECONDS_BY_PART,
    StageContext,
    StageInputError,
    StageReport,
    _catalog_session,
    _check_sources,
    _execute,
    _Planned,
    _upstream,
    ensure_writable,
    run_on_backend,
)
from llm_assets.stages.filtered_documents.nothing_kept import NothingKeptError
from llm_assets.stages.shard_io import TOKENIZER_META, add_parts, carried_metadata
from llm_assets.stages.training_batches.checks import (
    MIXTURE_WITHOUT_MEGATRON,
    _augment_tokenizer,
    _eos_id,
    balance_needs_labels,
    balance_without_megatron,
    label_needs_a_padded_layout,
)
from llm_assets.stages.training_batches.completion import (
    _RECORDED_BATCH_EXTRAS,
    COMPLETE_MARKER,
    _complete_batches,
    _mark_complete,
    _unmark_complete,
)
from llm_assets.stages.training_batches.gather import GatherTask, run_gather
from llm_assets.stages.training_batches.megatron import _write_megatron
from llm_assets.stages.training_batches.quotas import _balance_quotas, _mixture_quotas, _per_split
from llm_assets.stages.training_batches.report import (
    _label_documents,
    _log_augment,
    _report_mixture,
    _warn_lost_tokens,
)
from llm_assets.stages.training_batches.scatter import (
    SPLITS,
    ScatterTask,
    read_scatter_manifest,
    run_scatter,
    scatter_columns,
    scatter_done,
    scatter_key,
    scatter_pieces,
)
from llm_assets.storage import modified_times
from llm_assets.warehouse.layout import SCATTER_FOLDER, scatter_folder_name, scatter_settings
from llm_assets.warehouse.shards import (
    decoded_column_bytes,
    fingerprint,
    remove_stale_temporaries,
    shard_file_name,
    stage_dir,
)

if TYPE_CHECKING:
    from llm_assets.kernels.tokenize.spec import TokenizerSpec
    from llm_assets.warehouse.catalog import ShardRecord

SHUFFLE_BUCKET_BYTES = 8 * 1024 * 1024
"""Target size of one shuffle bucket: decoded bytes of the columns the shuffle holds
(:func:`~llm_assets.stages.training_batches.scatter.scatter_columns`, token ids as Parquet's
32-bit values), which bounds the memory of one gather task. At 8 MB a gather task peaks ~40 MB
above a worker's idle size (16 MB: ~80 MB); n_buckets is part of the scatter fingerprint, so
changing it never reuses stale buckets."""


PADDED_TOKENS_PER_BUCKET = 4 * 1024 * 1024
"""Target size of one shuffle bucket of the ``padded`` layout, in padded tokens (rows times
``seq_len``), so that short documents padded to a long ``seq_len`` are bounded too: a padded
gather of 4 Mi padded tokens peaks ~120 MB above idle (ids, mask and labels, and the Parquet
writer's pages). Counting the token bytes alone, 3,000 documents of ~30 tokens padded to 32,768
go to one gather task, which peaks at 1.4 GB; bounded so, they are 24 buckets, 518 MB for the
whole in-process run (394 MB at ``seq_len`` 1024)."""


def shuffle_bucket_count(
    paths: Sequence[str],
    minimum: int = 1,
    padded_len: int = 0,
    text: bool = False,
    repeat: int = 1,
) -> int:
    """How many shuffle buckets the filtered shards at ``paths`` need: at least ``minimum``, and
    enough that none holds more than :data:`SHUFFLE_BUCKET_BYTES` of the columns the shuffle
    reads, nor (with ``padded_len``, the length every row is padded to) more than
    :data:`PADDED_TOKENS_PER_BUCKET` padded tokens. ``text``: the shuffle reads the text too
    (``augment``); ``repeat``: each document is there this many times (``augment_copies + 1``:
    the variants are held as their documents are), so both counts are multiplied by it.

    Counted from the footers (decoded sizes and row counts), not the files' sizes: the codec of
    the shards, and their text column unless ``text``, do not change the count."""
    total = repeat * sum(
        decoded_column_bytes(path, scatter_columns(storage.parquet_schema(path).names, text=text))
        for path in paths
    )
    buckets = -(-total // SHUFFLE_BUCKET_BYTES)
    if padded_len:
        rows = repeat * sum(storage.parquet_metadata(path).num_rows for path in paths)
        buckets = max(buckets, -(-rows * padded_len // PADDED_TOKENS_PER_BUCKET))
    return max(minimum, buckets)


@dataclass(frozen=True)
class _BatchRun:
    """What every phase of one ``training_batches`` run shares, settled before any work."""

    spec: BatchSpec
    """With the length buckets derived from the data, when ``bucketed`` needs them."""
    megatron: bool
    compression_level: int | None
    upstream: list[ShardRecord]
    n_buckets: int
    config: dict[str, Any]
    scatter_fp_base: tuple[Any, ...]
    all_fp: str
    stage_fp: str
    folder: Path
    scatter_root: Path
    meta: dict[str, str]
    columns: tuple[str, ...]
    token_type: str
    eos_id: int | None
    augment_tokenizer: TokenizerSpec | None
    created_at: str

    @property
    def mixed(self) -> bool:
        return self.spec.mixture is not None

    @property
    def labelled(self) -> bool:
        return LABEL in self.columns

    @property
    def tokenizer_extra(self) -> dict[str, str]:
        return {
            # What a training script passes to the reader's expected_tokenizer_fingerprint.
            "tokenizer": self.meta.get(f"{TOKENIZER_META}name", ""),
            "tokenizer_fingerprint": self.meta.get(f"{TOKENIZER_META}fingerprint", ""),
        }


@_catalog_session
def run_training_batches(
    ctx: StageContext,
    spec: BatchSpec,
    compression_level: int | None = None,
    megatron: bool = False,
) -> StageReport:
    """Shuffle globally with bounded memory (scatter to hash buckets, then sort each bucket) and
    pack or pad every (split, bucket) into one Parquet file.

    Unlike the document stages, whose shards are one per input shard and replaced one for one,
    the batch files are a set whose size follows the data (one per split and shuffle bucket), so
    their folder is named by the stage config *and* the upstream state (every filtered shard's
    checksum): ``training_batches/<fingerprint>/`` holds exactly one consistent set, a pure
    function of its name. Another upstream state writes another folder (never over this one's
    files, never beside them), and coming back to this one reuses it, catalog rows included. The
    scatter files are content-addressed too (``training_batches/_scatter/<shard>-<input>/``), so
    every batch config and upstream state shares those of the shards it has in common.

    The folder's :data:`COMPLETE_MARKER` is removed before the run writes anything into it and
    written as its very last step (after the catalog's record), so a run stopped mid-gather leaves
    a folder the reader refuses; a complete folder reused without its marker (an earlier release's)
    gets it, nothing recomputed."""
    started = time.time()
    run = _prepare(ctx, spec, compression_level, megatron)
    if stale := remove_stale_temporaries(run.scatter_root):
        ctx.log.info(f"{TRAINING_BATCHES}: removed {stale} scatter folder(s) of interrupted runs")
    done = _complete_batches(ctx, run.stage_fp, run.folder, megatron, run.all_fp)
    if done is not None:
        planned, extra = _reuse_complete(ctx, run, *done)
    else:
        planned, extra = _scatter_and_plan(ctx, run)
    report = _execute(
        ctx,
        asset=TRAINING_BATCHES,
        stage_fp=run.stage_fp,
        folder=run.folder,
        config=run.config,
        planned=planned,
        fn=run_gather,
        extra=extra,
        started=started,  # every phase (and the planning), not only the gather
    )
    _finish(ctx, run, report, reused=done is not None)
    return report


def _prepare(
    ctx: StageContext, spec: BatchSpec, compression_level: int | None, megatron: bool
) -> _BatchRun:
    """Read the filtered shards' state and settle the run: shuffle buckets, config, fingerprints
    and folders, the tokenizer's metadata; refuses (:class:`StageInputError`) configs that do not
    go together, before any work."""
    asset = TRAINING_BATCHES
    upstream = _upstream(ctx, FILTERED_DOCUMENTS)
    if not sum(source.rows_out for source in upstream):
        raise NothingKeptError(
            f"{asset}: {FILTERED_DOCUMENTS} holds no document, so the batches would be empty "
            "and training would run zero steps: see why in the catalog (SELECT stage, reason, "
            f"count(*) FROM rejects GROUP BY ALL ORDER BY 3 DESC; catalog {ctx.catalog.path}), "
            "and materialize the stages before it again"
        )
    # The padded layout pads every row to seq_len (pad_to: longest, to at most seq_len): short
    # documents grow many times over, so its buckets are also bounded in padded tokens.
    n_buckets = shuffle_bucket_count(
        [s.path for s in upstream],
        spec.shuffle_buckets,
        padded_len=spec.seq_len if spec.layout == "padded" else 0,
        text=spec.augment != "none",
        repeat=spec.augment_copies + 1,
    )
    config = _batch_config(spec, compression_level)
    # What the scatter of one shard depends on besides its bytes; with every shard's checksum,
    # what every batch file depends on besides the config (the files' source_fingerprint).
    mixed = spec.mixture is not None
    scatter_fp_base = scatter_settings(
        spec.seed, spec.validation_fraction, n_buckets, spec.augment != "none", mixed
    )
    all_fp = fingerprint([s.checksum for s in upstream], *scatter_fp_base)
    stage_fp = fingerprint(asset, STAGE_CODE_VERSIONS[asset], config, all_fp)
    meta = carried_metadata(upstream[0].path)
    schema = storage.parquet_schema(upstream[0].path)
    eos_id = _eos_id(meta, spec, megatron, sft=PROMPT_TOKENS in schema.names)
    _refuse_conflicts(spec, schema.names, megatron)
    augment_tokenizer = _augment_tokenizer(spec, schema.names, meta, megatron)
    if spec.layout == "bucketed" and spec.bucket_boundaries is None:
        spec = replace(spec, bucket_boundaries=_derived_boundaries(ctx, spec))
        ctx.log.info(f"{asset}: length buckets from the data: {spec.bucket_boundaries}")
    return _BatchRun(
        spec=spec,
        megatron=megatron,
        compression_level=compression_level,
        upstream=upstream,
        n_buckets=n_buckets,
        config=config,
        scatter_fp_base=scatter_fp_base,
        all_fp=all_fp,
        stage_fp=stage_fp,
        folder=stage_dir(ctx.warehouse_root, asset, stage_fp),
        scatter_root=stage_dir(ctx.warehouse_root, asset, SCATTER_FOLDER),
        meta=meta,
        columns=tuple(schema.names),
        token_type=str(schema.field(INPUT_IDS).type.value_type),
        eos_id=eos_id,
        augment_tokenizer=augment_tokenizer,
        created_at=_created_at(ctx),
    )


def _batch_config(spec: BatchSpec, compression_level: int | None) -> dict[str, Any]:
    """The stage config: the spec's fields, those of options left off removed, so that the
    folders of runs without them keep their names."""
    config = {**asdict(spec), "compression_level": compression_level}
    if spec.balance == "none":  # the folders of runs without it keep their names
        del config["balance"], config["max_copies"]
    if spec.augment == "none":  # likewise
        del config["augment"], config["augment_copies"], config["augment_rate"]
    if spec.mixture is None:  # likewise
        del config["mixture"]
    if spec.layout == "packed" and spec.overflow == "truncate":
        config["cut_eos"] = "masked"  # the EOS after a cut SFT document is not learned
    return config


def _refuse_conflicts(spec: BatchSpec, columns: Sequence[str], megatron: bool) -> None:
    """A :class:`StageInputError` for settings that do not go together with the documents'
    columns or the Megatron export."""
    if spec.layout == "packed" and LABEL in columns:
        raise StageInputError(label_needs_a_padded_layout(spec.layout))
    if spec.balance != "none" and LABEL not in columns:
        raise StageInputError(balance_needs_labels(spec.balance))
    if spec.balance != "none" and megatron:
        raise StageInputError(balance_without_megatron(spec.balance))
    if spec.mixture is not None and megatron:
        raise StageInputError(MIXTURE_WITHOUT_MEGATRON)


def _reuse_complete(
    ctx: StageContext, run: _BatchRun, records: list[ShardRecord], recorded: dict[str, Any]
) -> tuple[list[_Planned], dict[str, Any]]:
    """The folder of this upstream state and config is complete: reuse it as it is, without the
    shuffle, whose intermediate files may be gone (``_scatter/`` is safe to delete)."""
    ctx.log.info(
        f"{TRAINING_BATCHES}: {run.folder} is complete for this input and config: reused as it is"
    )
    planned = [
        _Planned(r.shard, r.path, r.rejects_path, r.input_fingerprint, r.input_shards, None)
        for r in records
    ]
    extra: dict[str, Any] = {
        **{
            k: recorded[k]
            for k in _RECORDED_BATCH_EXTRAS
            if k in recorded and (run.megatron or k != "megatron")
        },
        "scatter_seconds": 0.0,
        "shuffle_buckets": run.n_buckets,
        "source_fingerprint": run.all_fp,
        **run.tokenizer_extra,
        SECONDS_BY_PART: {},
    }
    return planned, extra


def _scatter_and_plan(ctx: StageContext, run: _BatchRun) -> tuple[list[_Planned], dict[str, Any]]:
    """This run writes into the folder (its batch files, its Megatron export): it is not one
    complete set until the end, so its marker goes first, and comes back last. Scatter the
    shards, plan the quotas and the gather tasks, write the Megatron export."""
    spec = run.spec
    if _unmark_complete(run.folder):
        ctx.log.info(
            f"{TRAINING_BATCHES}: {run.folder} is written again: its {COMPLETE_MARKER} removed"
        )
    scatter_dirs, scatter_seconds, scatter_parts = _scatter(ctx, run)
    scattered = _Scattered.read(scatter_dirs)
    pieces = scatter_pieces(scatter_dirs)
    prompted = PROMPT_TOKENS in run.columns
    if spec.mixture is not None:
        quotas, planned_mixture = _mixture_quotas(
            ctx, spec.mixture, spec, scattered.file_counts, run.n_buckets, pieces, prompted
        )
    else:
        quotas = _balance_quotas(ctx, spec, scattered.label_counts, run.n_buckets, pieces, prompted)
    planned = _plan_gather(run, scattered.counts, pieces, quotas)
    lengths = scattered.lengths
    extra = {
        "scatter_seconds": scatter_seconds,
        "shuffle_buckets": run.n_buckets,
        "source_fingerprint": run.all_fp,
        **run.tokenizer_extra,
        SECONDS_BY_PART: scatter_parts,
        # Kept in the catalog's record, so that reusing the folder later reports them too.
        "length_histogram": length_histogram(
            np.array(list(lengths), np.int64),
            spec.seq_len,
            weights=np.array(list(lengths.values())),
        ),
    }
    if spec.bucket_boundaries:
        extra["bucket_boundaries"] = list(spec.bucket_boundaries)
    if run.labelled:
        extra["label_documents_in"] = _per_split(scattered.label_counts)
    if spec.mixture is not None:
        extra["mixture_planned"] = planned_mixture
    if run.megatron:
        # From the scatter files, like the gather: before it, so that the catalog's record of
        # the materialization holds the export's paths and its time. In the batches' own folder,
        # so it belongs to one upstream state as they do.
        filled = [
            s
            for s in SPLITS
            if any(k.startswith(f"{s}-") and n for k, n in scattered.counts.items())
        ]
        extra["megatron"] = _write_megatron(
            ctx, run.folder, tuple(scatter_dirs), run.n_buckets, run.meta, run.all_fp, filled
        )
    return planned, extra


def _scatter(ctx: StageContext, run: _BatchRun) -> tuple[list[str], float, dict[str, float]]:
    """Scatter every filtered shard whose scatter folder is not complete for its input; the
    scatter folders of all of them, the seconds it took and its seconds per part."""
    asset = TRAINING_BATCHES
    spec = run.spec
    scatter_started = time.perf_counter()
    scatter_tasks = []
    scatter_dirs = []
    for source in run.upstream:
        input_fp = fingerprint(source.checksum, *run.scatter_fp_base)
        name = scatter_folder_name(
            source.shard,
            source.checksum,
            spec.seed,
            spec.validation_fraction,
            run.n_buckets,
            text=spec.augment != "none",
            sources=run.mixed,
        )
        out_dir = str(run.scatter_root / name)
        scatter_dirs.append(out_dir)
        if not scatter_done(out_dir, input_fp, labelled=run.labelled, sources=run.mixed):
            _check_sources(asset, [source])
            scatter_tasks.append(
                ScatterTask(source.shard, source.path, out_dir, input_fp, spec, run.n_buckets)
            )
    ctx.log.info(
        f"{asset}: shuffling into {run.n_buckets} bucket(s); scattering {len(scatter_tasks)} of "
        f"{len(run.upstream)} shard(s)"
    )
    ensure_writable(run.scatter_root)
    scatter_parts: dict[str, float] = {}

    def scattered(_: int, stats: dict[str, Any]) -> None:
        nonlocal scatter_parts
        scatter_parts = add_parts(scatter_parts, stats.get("parts", {}))

    run_on_backend(ctx, asset, run.scatter_root, run_scatter, scatter_tasks, scattered)
    # A worker killed mid-scatter leaves its temporary folder; its retry wrote the folder anew.
    if stale := remove_stale_temporaries(run.scatter_root):
        ctx.log.info(f"{asset}: removed {stale} scatter folder(s) of interrupted attempts")
    return scatter_dirs, time.perf_counter() - scatter_started, scatter_parts


@dataclass
class _Scattered:
    """What the scatter manifests count, summed over the scatter folders."""

    counts: Counter[str] = field(default_factory=Counter)
    """Documents per (split, bucket) key."""
    lengths: Counter[int] = field(default_factory=Counter)
    """Documents per token count."""
    label_counts: dict[str, Counter[str]] = field(default_factory=dict)
    """Per (split, bucket) key, documents per class label."""
    file_counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """Per (split, bucket) key, [documents, tokens] per input file."""

    @classmethod
    def read(cls, scatter_dirs: Sequence[str]) -> _Scattered:
        totals = cls()
        for directory in scatter_dirs:
            manifest = read_scatter_manifest(directory)
            totals.counts.update(manifest["counts"])
            totals.lengths.update({int(n): d for n, d in manifest["lengths"].items()})
            for key, per_label in manifest.get("labels", {}).items():
                totals.label_counts.setdefault(key, Counter()).update(per_label)
            for key, per_file in manifest.get("sources", {}).items():
                held = totals.file_counts.setdefault(key, {})
                for name, (docs, tokens) in per_file.items():
                    was = held.setdefault(name, [0, 0])
                    was[0] += int(docs)
                    was[1] += int(tokens)
        return totals


def _plan_gather(
    run: _BatchRun,
    counts: Mapping[str, int],
    pieces: Mapping[str, Sequence[Any]],
    quotas: Mapping[int, tuple[LabelQuota, ...]],
) -> list[_Planned]:
    """One gather task per (split, bucket) that holds documents."""
    spec, meta = run.spec, run.meta
    planned = []
    for split in SPLITS:
        for bucket in range(run.n_buckets):
            key = scatter_key(split, bucket)
            if not counts.get(key):
                continue
            out = str(run.folder / shard_file_name(key))
            file_meta = {
                k.decode(): v.decode()
                for k, v in batch_schema_metadata(
                    spec=spec,
                    tokenizer_name=meta.get(f"{TOKENIZER_META}name", ""),
                    tokenizer_fingerprint=meta.get(f"{TOKENIZER_META}fingerprint", ""),
                    vocab_size=int(meta.get(f"{TOKENIZER_META}vocab_size", "0") or 0),
                    split=split,
                    input_fingerprint=run.all_fp,
                    created_at=run.created_at,
                ).items()
            }
            rej = str(run.folder / "rejects" / shard_file_name(key))
            task = GatherTask(
                key=key,
                split=split,
                bucket=bucket,
                pieces=tuple(pieces[key]),
                output_path=out,
                input_fingerprint=run.all_fp,
                spec=spec,
                eos_id=run.eos_id,
                pad_id=int(meta[f"{TOKENIZER_META}pad_id"]),
                token_type=run.token_type,
                metadata=tuple(sorted({**meta, **file_meta}.items())),
                compression_level=run.compression_level,
                rejects_path=rej,
                balance=quotas.get(bucket, ()) if split == "train" else (),
                repeat=spec.augment_copies + 1 if split == "train" else 1,
                tokenizer=run.augment_tokenizer if split == "train" else None,
            )
            sources = tuple(s.path for s in run.upstream)
            planned.append(_Planned(key, out, rej, run.all_fp, sources, task))
    return planned


def _finish(ctx: StageContext, run: _BatchRun, report: StageReport, reused: bool) -> None:
    """Last: written and recorded, the folder is marked complete (or left as marked, when
    reused); then what the batch files hold is reported and logged."""
    asset, spec = TRAINING_BATCHES, run.spec
    if _mark_complete(run.folder, run.stage_fp, run.all_fp, report.shards) and reused:
        ctx.log.info(
            f"{asset}: {run.folder} marked complete ({COMPLETE_MARKER}): it was complete, and its "
            "marker missing (written by a release before the markers, or a run stopped before "
            "marking) or out of date"
        )
    report.extra["documents"] = report.rows_in
    report.extra["sequences"] = report.rows_out
    if run.labelled:
        report.extra["label_documents"] = _label_documents(report)
        ctx.log.info(f"{asset}: documents per class label: {report.extra['label_documents']}")
    if spec.mixture is not None:
        _report_mixture(ctx, report, spec.mixture)
    _log_augment(ctx, report, spec)
    _warn_lost_tokens(ctx, report, spec)
    ctx.log.info(
        f"{asset}: {report.extra['scatter_seconds']:.2f} s of the {report.seconds:.2f} s were "
        "scattering"
    )


def _derived_boundaries(ctx: StageContext, spec: BatchSpec) -> tuple[int, ...]:
    """Length-bucket bounds at evenly spaced quantiles of the filtered documents' lengths."""
    k = spec.length_buckets
    quantiles = [i / k for i in range(1, k)]
    row = ctx.catalog.query(
        f"SELECT quantile_cont(least(n_tokens, ?), ?::DOUBLE[]) FROM {FILTERED_DOCUMENTS}",
        [spec.seq_len, quantiles],
    )
    values = row[0][0] if row and row[0][0] is not None else []
    return derive_boundaries(values, spec.seq_len)


def _created_at(ctx: StageContext) -> str:
    """Reproducible creation time of the batches: ``SOURCE_DATE_EPOCH`` when set (the
    reproducible-builds convention), else the newest modification time of the input files, so a
    re-run on the same inputs writes byte-identical files (of objects in object storage: the
    time they were written)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        shards = ctx.catalog.current_shards(RAW_DOCUMENTS)
        inputs = {path for shard in shards for path in shard.input_shards}
        epoch = str(int(max(modified_times(sorted(inputs)).values(), default=0)))
    stamp = datetime.fromtimestamp(int(epoch), tz=timezone.utc)
    return stamp.isoformat().replace("+00:00", "Z")
