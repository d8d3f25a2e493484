"""The Megatron-LM export: one indexed dataset per split, documents in shuffle order."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llm_assets import storage
from llm_assets.constants import TRAINING_BATCHES
from llm_assets.kernels.batching.shuffle import shuffle_order
from llm_assets.kernels.schema import DOC_ID, INPUT_IDS
from llm_assets.stages.engine import StageContext, run_on_backend
from llm_assets.stages.shard_io import TOKENIZER_META
from llm_assets.stages.training_batches.scatter import (
    SPLITS,
    read_scatter_pieces,
    scatter_key,
    scatter_pieces,
)
from llm_assets.storage import location_path
from llm_assets.warehouse.shards import remove_stale_temporaries


def _write_megatron(
    ctx: StageContext,
    folder: Path,
    scatter_dirs: tuple[str, ...],
    n_buckets: int,
    meta: dict[str, str],
    input_fp: str,
    splits: Sequence[str],
) -> dict[str, str]:
    """One Megatron-LM dataset per split of ``splits`` (those with documents) under
    ``<folder>/megatron/``, reused when complete. A split without documents gets none: Megatron
    cannot memory-map an empty ``.bin`` (with ``validation_fraction: 0``, no validation set).

    ``folder`` is the batches' folder, named by the upstream state like them: the export of
    another state goes to that state's folder, so no ``.bin`` of one state ever sits beside the
    ``.idx`` or sidecar of another."""
    tasks = []
    prefixes = {}
    if empty := [s for s in SPLITS if s not in splits]:
        ctx.log.info(f"{TRAINING_BATCHES}: no Megatron dataset for {empty}: no document")
    for split in splits:
        prefix = str(folder / "megatron" / f"{split}_text_document")
        prefixes[split] = prefix
        if not megatron_done(prefix, input_fp):
            tasks.append(
                MegatronTask(
                    key=f"megatron-{split}",
                    split=split,
                    n_buckets=n_buckets,
                    scatter_dirs=scatter_dirs,
                    prefix=prefix,
                    vocab_size=int(meta[f"{TOKENIZER_META}vocab_size"]),
                    eos_id=int(meta[f"{TOKENIZER_META}eos_id"]),  # checked by _eos_id
                    input_fingerprint=input_fp,
                )
            )
    ctx.log.info(f"{TRAINING_BATCHES}: writing {len(tasks)} Megatron dataset(s) (.bin/.idx)")
    remove_stale_temporaries(folder / "megatron")  # what a killed export left (local only)
    run_on_backend(ctx, TRAINING_BATCHES, folder / "megatron", run_megatron, tasks)
    return prefixes


@dataclass(frozen=True)
class MegatronTask:
    """Write one split's documents, in the batches' shuffle order, as a Megatron dataset."""

    key: str
    split: str
    n_buckets: int
    scatter_dirs: tuple[str, ...]
    prefix: str
    vocab_size: int
    eos_id: int
    input_fingerprint: str


def megatron_done(prefix: str | Path, input_fingerprint: str) -> bool:
    """True when ``<prefix>.bin/.idx`` exist for this input (their ``.json`` sidecar says so)
    and the ``.bin`` has the size the sidecar recorded; either file deleted or cut short (or a
    sidecar without the size, of an earlier release, or unreadable), the export is written again."""
    if not all(storage.exists(f"{prefix}{ext}") for ext in (".json", ".idx", ".bin")):
        return False
    try:
        recorded = json.loads(storage.read_text(f"{prefix}.json"))
        size = storage.file_size(f"{prefix}.bin")
    except (OSError, ValueError):
        return False
    return (
        isinstance(recorded, dict)
        and recorded.get("input_fingerprint") == input_fingerprint
        and recorded.get("bin_bytes") == size
    )


def run_megatron(task: MegatronTask) -> dict[str, Any]:
    """Worker side: stream bucket by bucket (bounded memory), each bucket in shuffle order, every
    document followed by EOS (as Megatron's ``preprocess_data.py --append-eod`` does). In object
    storage the two files are written to a local temporary folder and uploaded (the ``.bin``,
    then the ``.idx``), the sidecar last, as locally."""
    started = time.perf_counter()
    if not storage.is_remote(task.prefix):
        documents, tokens = _write_export(task, task.prefix)
        bin_bytes = Path(f"{task.prefix}.bin").stat().st_size
    else:
        with tempfile.TemporaryDirectory(prefix="llm_assets-megatron-") as spool:
            local = str(Path(spool) / location_path(task.prefix).name)
            documents, tokens = _write_export(task, local)
            for ext in (".bin", ".idx"):
                storage.upload_file(f"{local}{ext}", f"{task.prefix}{ext}")
            bin_bytes = Path(f"{local}.bin").stat().st_size
    sidecar = {
        "input_fingerprint": task.input_fingerprint,
        "documents": documents,
        "tokens": tokens,
        "bin_bytes": bin_bytes,
    }
    storage.write_bytes(f"{task.prefix}.json", json.dumps(sidecar).encode())
    return {
        "split": task.split,
        "documents": documents,
        "tokens": tokens,
        "seconds": time.perf_counter() - started,
    }


def _write_export(task: MegatronTask, prefix: str) -> tuple[int, int]:
    """Write the split's ``<prefix>.bin/.idx`` (local files); its documents and tokens."""
    from llm_assets.kernels.megatron import MegatronWriter

    writer = MegatronWriter(prefix, task.vocab_size)
    documents = tokens = 0
    pieces = scatter_pieces(task.scatter_dirs)
    try:
        for bucket in range(task.n_buckets):
            table = read_scatter_pieces(pieces.get(scatter_key(task.split, bucket), []))
            if table is None:
                continue
            order = shuffle_order(table["shuffle_key"].to_numpy(), table[DOC_ID].to_pylist())
            ids = table[INPUT_IDS].combine_chunks()
            values = ids.values.to_numpy(zero_copy_only=False)
            offsets = ids.offsets.to_numpy()
            for i in order:
                document = np.append(values[offsets[i] : offsets[i + 1]], task.eos_id)
                writer.add_document(document)
                documents += 1
                tokens += len(document)
        writer.finalize()
    except BaseException:
        writer.abort()
        raise
    return documents, tokens
