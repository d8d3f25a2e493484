"""The dataset reader over training_batches output: items equal the Parquet rows, shards over
ranks and DataLoader workers partition the rows (or pre-formed batches) exactly, files follow
bucket order, empty splits are empty datasets, and mismatched metadata is refused."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.kernels.batching.metadata import batch_schema_metadata
from llm_assets.kernels.batching.packed import pack_sequences
from llm_assets.kernels.batching.padded import pad_sequences
from llm_assets.kernels.batching.sequences import BATCH
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.reader import (
    COMPLETE_MARKER,
    IncompleteBatchesError,
    IterableTokenBatches,
    MetadataMismatchError,
    MixedSourcesError,
    NoPreformedBatchesError,
    TokenBatchDataset,
    batch_files,
    check_complete,
    megatron_prefixes,
)

SEQ = 32


def _write(
    folder,
    split: str,
    part: int,
    n_docs: int,
    seed: int,
    fingerprint: str = "fp",
    source: str = "in",
) -> None:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 50_000, rng.integers(1, 90), dtype=np.uint16) for _ in range(n_docs)]
    names = [f"{split}-{part}-{seed}-{i}" for i in range(n_docs)]
    # As training_batches writes them: with each block's documents (doc_ids).
    table, _ = pack_sequences(docs, SEQ, 50256, 50256, False, pa.uint16(), doc_ids=names)
    meta = batch_schema_metadata(
        spec=BatchSpec(seq_len=SEQ),
        tokenizer_name="gpt2",
        tokenizer_fingerprint=fingerprint,
        vocab_size=50257,
        split=split,
        input_fingerprint=source,
    )
    pq.write_table(
        table.replace_schema_metadata(meta),
        folder / f"part-{split}-{part:05d}.parquet",
        row_group_size=7,
    )
    _mark(folder)


def _mark(folder) -> None:
    """The completion marker ``training_batches`` writes last (``reader.COMPLETE_MARKER``), over
    the folder's batch files as they are now: the folders here are built by hand, file by file,
    so each write marks the folder again (a test that changes a file by hand re-marks it)."""
    files = {
        p.name: {"rows": pq.read_metadata(p).num_rows, "bytes": p.stat().st_size, "checksum": ""}
        for p in folder.glob("part-*.parquet")
    }
    (folder / COMPLETE_MARKER).write_text(json.dumps({"format": 1, "files": files}))


@pytest.fixture
def batches(tmp_path):
    for part in range(3):
        _write(tmp_path, "train", part, 20 + 5 * part, seed=part)
    _write(tmp_path, "validation", 0, 6, seed=9)
    return tmp_path


def _all_rows(folder, split="train") -> list[list[int]]:
    return [
        row for f in batch_files(folder, split) for row in pq.read_table(f)["input_ids"].to_pylist()
    ]


def test_map_style_items_equal_the_parquet_rows(batches):
    ds = TokenBatchDataset(batches, "train", expected_layout="packed", expected_seq_len=SEQ)
    rows = _all_rows(batches)
    assert len(ds) == len(rows)
    for i in itertools.chain(range(len(ds)), [-1]):
        item = ds[i]
        assert item["input_ids"].tolist() == rows[i]
        assert item["input_ids"].dtype == np.uint16 and len(item["attention_mask"]) == SEQ
    assert ds.get_batch([0, 3])["input_ids"].shape == (2, SEQ)
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert ds.metadata["llm_assets.layout"] == "packed"


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_ranks_partition_the_rows_without_overlap_or_gap(batches, world_size):
    rows = _all_rows(batches)
    seen = []
    for rank in range(world_size):
        ds = TokenBatchDataset(batches, "train", rank=rank, world_size=world_size)
        seen += [ds[i]["input_ids"].tolist() for i in range(len(ds))]
    assert seen == rows


def test_iterable_covers_everything_once(batches):
    rows = _all_rows(batches, "validation")
    items = [x["input_ids"].tolist() for x in IterableTokenBatches(batches, "validation")]
    assert items == rows


def test_metadata_mismatch_is_refused_naming_file_and_key(batches, tmp_path_factory):
    with pytest.raises(MetadataMismatchError, match=r"tokenizer\.fingerprint.*'other'"):
        TokenBatchDataset(batches, "train", expected_tokenizer_fingerprint="other")
    with pytest.raises(MetadataMismatchError, match="layout"):
        TokenBatchDataset(batches, "train", expected_layout="padded")
    with pytest.raises(MetadataMismatchError, match="seq_len"):
        TokenBatchDataset(batches, "train", expected_seq_len=2048)
    foreign = tmp_path_factory.mktemp("foreign")
    pq.write_table(pa.table({"input_ids": [[1, 2]]}), foreign / "part-train-00000.parquet")
    _mark(foreign)  # marked (else refused first as incomplete): the metadata is what is checked
    with pytest.raises(MetadataMismatchError, match="not an llm_assets batch file"):
        TokenBatchDataset(foreign, "train")
    with pytest.raises(ValueError, match=rf"{foreign} has no split 'test'.*of train"):
        TokenBatchDataset(foreign, "test")


def test_torch_dataloader_workers_cover_each_sequence_once(batches):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    rows = _all_rows(batches)
    loader = DataLoader(
        IterableTokenBatches(batches, "train", return_tensors="pt"),
        batch_size=None,
        num_workers=2,
    )
    seen = sorted(tuple(x["input_ids"].tolist()) for x in loader)
    assert seen == sorted(tuple(r) for r in rows)
    assert isinstance(
        TokenBatchDataset(batches, "train", return_tensors="pt")[0]["input_ids"], torch.Tensor
    )


def test_reader_without_torch_returns_numpy_and_refuses_tensors(batches):
    """Block the torch import in a fresh interpreter: the reader still works, with numpy."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from llm_assets.reader import TokenBatchDataset, IterableTokenBatches\n"
        f"ds = TokenBatchDataset({str(batches)!r}, 'train')\n"
        "import numpy as np; assert isinstance(ds[0]['input_ids'], np.ndarray)\n"
        f"assert len(list(IterableTokenBatches({str(batches)!r}, 'train'))) == len(ds)\n"
        "try:\n"
        f"    TokenBatchDataset({str(batches)!r}, 'train', return_tensors='pt')\n"
        "except ImportError as e:\n"
        "    print('refused:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "refused: return_tensors='pt' needs torch" in done.stdout


def test_columns_limits_what_is_decoded(batches):
    ds = TokenBatchDataset(batches, "train", columns=["input_ids"])
    assert set(ds[0]) == {"input_ids"}
    assert [
        x["input_ids"].tolist()
        for x in IterableTokenBatches(batches, "train", columns=["input_ids"])
    ] == _all_rows(batches)


def test_doc_ids_are_read_only_when_named(batches):
    """A packed block's documents (``doc_ids``, of different counts per block) are left out by
    default, so DataLoader's default collate works; named in ``columns`` they are lists."""
    default = TokenBatchDataset(batches, "train")
    assert set(default[0]) == {"input_ids", "attention_mask", "position_ids"}
    expected = [
        row
        for f in batch_files(batches, "train")
        for row in pq.read_table(f)["doc_ids"].to_pylist()
    ]
    assert len({len(row) for row in expected}) > 1  # blocks of different document counts
    for tensors in ("np", "pt") if torch_available() else ("np",):
        named = TokenBatchDataset(
            batches, "train", columns=["input_ids", "doc_ids"], return_tensors=tensors
        )
        assert [named[i]["doc_ids"] for i in range(len(named))] == expected
        assert named.get_batch([0, 1])["doc_ids"] == expected[:2]
    iterable = IterableTokenBatches(batches, "train", columns=["doc_ids"])
    assert [item["doc_ids"] for item in iterable] == expected


def test_a_column_the_files_lack_is_refused_not_skipped(batches):
    with pytest.raises(KeyError, match=r"no column 'doc_id' \(its columns: input_ids"):
        TokenBatchDataset(batches, "train", columns=["input_ids", "doc_id"])
    # a file of a release before doc_ids: the same, without the column
    current = pq.read_table(batch_files(batches, "train")[0])
    path = batches.parent / "old.parquet"
    pq.write_table(current.drop_columns(["doc_ids"]), path)
    with pytest.raises(KeyError, match=r"packed layout's files only.*code version 4"):
        TokenBatchDataset([path], None, columns=["input_ids", "doc_ids"])


def test_collate_keeps_each_blocks_doc_ids_together(batches):
    """The default collate transposes lists of equal length (and fails on unequal ones)."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from llm_assets.reader import collate

    ds = TokenBatchDataset(batches, "train", columns=["input_ids", "doc_ids"], return_tensors="pt")
    expected = [ds[i]["doc_ids"] for i in range(len(ds))]
    seen = []
    for batch in DataLoader(ds, batch_size=3, collate_fn=collate, num_workers=2):
        assert isinstance(batch["input_ids"], torch.Tensor) and batch["input_ids"].shape[1] == SEQ
        assert len(batch["doc_ids"]) == batch["input_ids"].shape[0]
        seen += batch["doc_ids"]
    assert seen == expected
    numpy_ds = TokenBatchDataset(batches, "train", columns=["input_ids", "doc_ids"])
    batch = collate([numpy_ds[0], numpy_ds[1]])
    assert batch["input_ids"].shape == (2, SEQ) and batch["doc_ids"] == expected[:2]
    whole = {"input_ids": np.zeros((2, SEQ)), "doc_id": ["a", "b"]}  # batches=True's items
    assert collate(whole) is whole


def test_collating_numpy_items_gives_default_collates_tensors_without_a_warning(batches):
    """Numpy items are read-only views of Arrow buffers: torch's default_collate wraps each in a
    tensor first and warns (once per process, so checked in a fresh one) that it is not
    writable. ``collate`` gives the tensor default_collate gives, silently."""
    torch = pytest.importorskip("torch")
    from llm_assets.reader import collate

    ds = TokenBatchDataset(batches, "train", columns=["input_ids", "position_ids", "doc_ids"])
    items = [ds[0], ds[1]]
    assert not items[0]["input_ids"].flags.writeable
    batch = collate(items)
    for key in ("input_ids", "position_ids"):
        expected = torch.utils.data.default_collate([item[key].copy() for item in items])
        assert batch[key].dtype == expected.dtype and torch.equal(batch[key], expected)
    script = (
        "import sys, warnings; warnings.simplefilter('error')\n"
        "from llm_assets.reader import TokenBatchDataset, collate\n"
        "ds = TokenBatchDataset(sys.argv[1], 'train', columns=['input_ids', 'doc_ids'])\n"
        "collate([ds[0], ds[1]])\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(batches)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert "not writable" not in run.stderr


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_files_of_two_upstream_states_in_one_folder_are_refused(batches):
    """A stale file of an earlier upstream state beside the current ones (what a batches folder
    shared by two states held): same tokenizer, layout and seq_len, so only the source
    fingerprint tells. Refused, naming each fingerprint with its files, by both datasets."""
    _write(batches, "train", 3, 10, seed=3, source="stale")
    message = (
        rf"{batches}: batch files of 2 different upstream states "
        r"\(llm_assets\.source_fingerprint differs\): 'in' in part-train-00000\.parquet, "
        r"part-train-00001\.parquet, part-train-00002\.parquet, "
        r"part-validation-00000\.parquet; 'stale' in "
        r"part-train-00003\.parquet\. .*current folder"
    )
    with pytest.raises(MixedSourcesError, match=message):
        TokenBatchDataset(batches, "train")
    with pytest.raises(MixedSourcesError, match=message):
        IterableTokenBatches(batches, "train", expected_layout="packed", expected_seq_len=SEQ)
    assert issubclass(MixedSourcesError, MetadataMismatchError)


def test_a_folder_whose_other_split_is_of_another_state_is_refused(batches):
    """Train files all of one state, the validation file of another: the two splits would
    divide the documents differently (a validation document may be in train), so reading
    either split of that folder is refused; the files of one split as a list are one set."""
    (batches / "part-validation-00000.parquet").unlink()
    _write(batches, "validation", 0, 6, seed=9, source="stale")
    for split in ("train", "validation"):
        with pytest.raises(MixedSourcesError, match=r"'in' in part-train-00000.*'stale' in"):
            TokenBatchDataset(batches, split)
    train = batch_files(batches, "train")
    assert len(TokenBatchDataset(train, "train")) == len(_all_rows(batches))


def test_a_list_of_files_of_two_states_is_refused_with_their_paths(batches, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    _write(other, "train", 0, 5, seed=1, source="other")
    files = [*batch_files(batches, "train"), other / "part-train-00000.parquet"]
    with pytest.raises(MixedSourcesError, match=rf"'other' in {other}/part-train-00000\.parquet"):
        TokenBatchDataset(files, "train")


def test_a_folder_without_its_completion_marker_is_refused(batches):
    """What a run stopped mid-gather leaves: some of the folder's batch files and no marker (it is
    written last), which would read as if it were the whole set (53 validation rows of 105).
    Refused by every way of reading a folder, saying what happened and what to do;
    the same files passed explicitly are read as given."""
    (batches / COMPLETE_MARKER).unlink()
    (batches / "part-train-00002.parquet").unlink()
    message = (
        rf"{batches} is incomplete: it has no completion marker _COMPLETE\.json.*A run stopped "
        r"while writing it.*before the markers.*Materialize training_batches again"
    )
    for read in (
        lambda: TokenBatchDataset(batches, "train"),
        lambda: TokenBatchDataset(batches, "validation"),
        lambda: IterableTokenBatches(batches, "train"),
        lambda: batch_files(batches),
        lambda: batch_files(batches, "validation"),
        lambda: check_complete(batches),
    ):
        with pytest.raises(IncompleteBatchesError, match=message):
            read()
    files = sorted(batches.glob("part-train-*.parquet"))
    assert len(TokenBatchDataset(files, "train")) == sum(
        pq.read_metadata(f).num_rows for f in files
    )
    assert len(TokenBatchDataset(batches / "part-validation-00000.parquet", "validation")) > 0


def test_a_folder_whose_files_differ_from_its_marker_is_refused(batches, tmp_path_factory):
    """The marker lists the set the run wrote: a listed file gone, a file it does not list, or a
    file of another size (cut, or replaced) is not that set, and is refused naming the files."""
    marker = (batches / COMPLETE_MARKER).read_text()
    (batches / "part-train-00001.parquet").unlink()
    with pytest.raises(
        IncompleteBatchesError,
        match=r"differ from the ones its completion marker _COMPLETE\.json lists \(missing: "
        r"part-train-00001\.parquet\).*Materialize training_batches again",
    ):
        TokenBatchDataset(batches, "validation")  # the other split's files count too
    _write(batches, "train", 1, 25, seed=1)  # put back, and marked again
    _write(batches, "train", 7, 3, seed=7)
    (batches / COMPLETE_MARKER).write_text(marker)  # the marker of before the extra file
    with pytest.raises(IncompleteBatchesError, match=r"not listed: part-train-00007\.parquet\)"):
        TokenBatchDataset(batches, "train")
    (batches / "part-train-00007.parquet").unlink()
    assert len(TokenBatchDataset(batches, "train")) == len(_all_rows(batches))
    cut = batches / "part-train-00000.parquet"
    cut.write_bytes(cut.read_bytes()[:-10])
    with pytest.raises(IncompleteBatchesError, match=r"another size than listed: part-train-00000"):
        IterableTokenBatches(batches, "train")
    (batches / COMPLETE_MARKER).write_text("{not json")
    with pytest.raises(IncompleteBatchesError, match=r"is not a completion marker"):
        TokenBatchDataset(batches, "train")
    # No batch file and no marker: not a batches folder at all (a wrong path), as before.
    with pytest.raises(FileNotFoundError, match="no batch files"):
        TokenBatchDataset(tmp_path_factory.mktemp("nothing"), "train")


def test_megatron_prefixes_are_given_only_for_the_export_the_marker_lists(batches):
    """Megatron-LM reads the ``.bin``/``.idx`` itself, without the reader: ``megatron_prefixes``
    is the checked way to its ``--data-path`` (folder marked complete, files of listed sizes)."""
    with pytest.raises(FileNotFoundError, match="no Megatron export"):
        megatron_prefixes(batches)
    export = batches / "megatron"
    export.mkdir()
    (export / "train_text_document.bin").write_bytes(b"\0" * 64)
    (export / "train_text_document.idx").write_bytes(b"\1" * 40)
    marker = json.loads((batches / COMPLETE_MARKER).read_text())
    marker["megatron"] = {
        "train": {"prefix": "megatron/train_text_document", "bin_bytes": 64, "idx_bytes": 40}
    }
    (batches / COMPLETE_MARKER).write_text(json.dumps(marker))
    assert megatron_prefixes(batches) == {"train": str(export / "train_text_document")}
    (export / "train_text_document.bin").write_bytes(b"\0" * 10)  # cut short
    with pytest.raises(IncompleteBatchesError, match=r"train_text_document\.bin .*10 bytes, 64"):
        megatron_prefixes(batches)
    (batches / COMPLETE_MARKER).unlink()
    with pytest.raises(IncompleteBatchesError, match="no completion marker"):
        megatron_prefixes(batches)


def test_the_reader_and_the_stage_name_the_same_marker():
    """The stage cannot import the reader (torch), so each names the marker: the same name."""
    from llm_assets.stages.training_batches import completion

    assert completion.COMPLETE_MARKER == COMPLETE_MARKER
    assert COMPLETE_MARKER.startswith("_") and not COMPLETE_MARKER.startswith("part-")


def _spawn_loader(dataset):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn")


def test_a_used_dataset_goes_to_spawned_dataloader_workers(batches):
    """``spawn`` (the default on macOS and Windows) pickles the dataset into each worker: after
    ``ds[0]`` (or one pass) it holds open ParquetFile handles, which must not travel along."""
    pytest.importorskip("torch")
    rows = sorted(tuple(r) for r in _all_rows(batches))
    ds = TokenBatchDataset(batches, "train", return_tensors="pt")
    ds[0]
    assert sorted(tuple(x["input_ids"].tolist()) for x in _spawn_loader(ds)) == rows
    it = IterableTokenBatches(batches, "train", return_tensors="pt")
    list(it)
    assert sorted(tuple(x["input_ids"].tolist()) for x in _spawn_loader(it)) == rows


def test_files_follow_numeric_bucket_order_past_five_digits(tmp_path):
    """Past 99,999 shuffle buckets the names have more digits: name order would put
    part-train-1050763 before part-train-105282; the reader keeps bucket order."""
    buckets = [3, 99_999, 100_000, 105_282, 1_050_763]
    for seed, bucket in enumerate(reversed(buckets)):
        _write(tmp_path, "train", bucket, 4 + seed, seed=seed)
    _write(tmp_path, "validation", 7, 3, seed=9)
    files = batch_files(tmp_path, "train")
    assert files == [tmp_path / f"part-train-{b:05d}.parquet" for b in buckets]
    assert [p.name for p in batch_files(tmp_path)][-1] == "part-validation-00007.parquet"
    rows = [r for f in files for r in pq.read_table(f)["input_ids"].to_pylist()]
    ds = TokenBatchDataset(tmp_path, "train")
    assert [ds[i]["input_ids"].tolist() for i in range(len(ds))] == rows


def test_an_empty_split_is_an_empty_dataset(batches, tmp_path_factory):
    """No validation file (``validation_fraction: 0``, or every document drawn into train) is
    an empty split, like files of no rows: length 0, nothing iterated; the expected metadata is
    still checked on the folder's files. Unknown splits and folders without batch files fail."""
    for path in batch_files(batches, "validation"):
        path.unlink()
    _mark(batches)  # as the pipeline writes a folder without validation file
    for make in (TokenBatchDataset, IterableTokenBatches):
        ds = make(batches, "validation", expected_layout="packed")
        assert len(ds) == 0 and list(ds) == []
    assert batch_files(batches, "validation") == []
    with pytest.raises(MetadataMismatchError, match="layout"):
        TokenBatchDataset(batches, "validation", expected_layout="padded")
    # batches=True is refused on a layout without pre-formed batches, whether or not the split
    # has a file.
    for split in ("train", "validation"):
        with pytest.raises(NoPreformedBatchesError):
            TokenBatchDataset(batches, split, batches=True)
    with pytest.raises(ValueError, match=r"has no split 'valid': its batch files are of train"):
        TokenBatchDataset(batches, "valid")
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(FileNotFoundError, match="no batch files"):
        TokenBatchDataset(empty, "train")
    _write(empty, "train", 0, 0, seed=0)  # every document of the split dropped: a 0-row file
    assert len(TokenBatchDataset(empty, "train")) == 0
    assert len(TokenBatchDataset(empty, "validation")) == 0


# --- pre-formed batches (bucketed; padded with pad_to: longest) -----------------------------------
BATCH_SIZE = 4


def _write_batched(folder, part: int, sizes: list[int], seed: int, split: str = "train"):
    """A file as the bucketed layout writes it: batches of ``sizes`` rows (a short one in the
    middle, as a length bucket's last batch), each padded to its longest row, with ``batch``."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    docs = [rng.integers(1, 50_000, rng.integers(1, SEQ + 9), dtype=np.uint16) for _ in range(n)]
    numbers = np.repeat(np.arange(len(sizes)), sizes)
    kept = np.minimum([len(d) for d in docs], SEQ)
    targets = np.concatenate([np.full(k, kept[numbers == b].max()) for b, k in enumerate(sizes)])
    table, _ = pad_sequences(
        docs,
        [f"{split}-{part}-{i}" for i in range(n)],
        SEQ,
        0,
        pa.uint16(),
        targets=targets,
        extra_columns={BATCH: pa.array(numbers, pa.int32())},
    )
    meta = batch_schema_metadata(
        spec=BatchSpec(layout="bucketed", seq_len=SEQ, batch_size=BATCH_SIZE),
        tokenizer_name="gpt2",
        tokenizer_fingerprint="fp",
        vocab_size=50257,
        split=split,
        input_fingerprint="in",
    )
    pq.write_table(
        table.replace_schema_metadata(meta),
        folder / f"part-{split}-{part:05d}.parquet",
        row_group_size=5,  # batches span row groups
    )
    _mark(folder)


@pytest.fixture
def batched(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("batched")
    _write_batched(tmp_path, 0, [4, 4, 1, 4, 3], seed=0)
    _write_batched(tmp_path, 1, [4], seed=1)
    _write_batched(tmp_path, 2, [2, 4, 4, 4, 4, 1, 4], seed=2)
    _write_batched(tmp_path, 0, [4, 2], seed=3, split="validation")
    return tmp_path


def _expected_batches(folder, split="train") -> list[tuple[list[str], list[list[int]]]]:
    out = []
    for path in batch_files(folder, split):
        table = pq.read_table(path).to_pydict()
        for number in dict.fromkeys(table[BATCH]):
            rows = [i for i, b in enumerate(table[BATCH]) if b == number]
            out.append(([table["doc_id"][i] for i in rows], [table["input_ids"][i] for i in rows]))
    return out


def _as_pair(item) -> tuple[list[str], list[list[int]]]:
    return list(item["doc_id"]), item["input_ids"].tolist()


def test_batches_mode_items_are_the_preformed_batches(batched):
    expected = _expected_batches(batched)
    ds = TokenBatchDataset(batched, "train", batches=True, expected_layout="bucketed")
    assert len(ds) == len(expected) == 13
    assert [_as_pair(ds[i]) for i in range(len(ds))] == expected
    item = ds[-1]
    assert item["input_ids"].ndim == 2 and item["input_ids"].dtype == np.uint16
    assert item["attention_mask"].shape == item["labels"].shape == item["input_ids"].shape
    assert isinstance(item["doc_id"], list) and item["n_tokens"].shape == (len(item["doc_id"]),)
    with pytest.raises(IndexError, match="13 batches"):
        ds[13]
    with pytest.raises(TypeError, match="already a batch"):
        ds.get_batch([0, 1])
    assert len(TokenBatchDataset(batched, "train")) == sum(len(b[0]) for b in expected)


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2])
def test_batches_shares_are_whole_batches_each_once(batched, monkeypatch, world_size, workers):
    """Ranks and workers get contiguous ranges of whole batches; in order, they give back
    every batch once, across file boundaries and short batches mid-file."""
    import llm_assets.reader as reader

    seen = []
    for rank in range(world_size):
        ds = IterableTokenBatches(batched, "train", batches=True, rank=rank, world_size=world_size)
        for worker in range(workers):
            monkeypatch.setattr(reader, "_worker", lambda w=worker: (w, workers))
            seen += [_as_pair(item) for item in ds]
        mapped = TokenBatchDataset(batched, "train", batches=True, rank=rank, world_size=3)
        assert len(mapped) == [4, 4, 5][rank]
    assert seen == _expected_batches(batched)


def test_batches_through_a_torch_dataloader(batched):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    expected = sorted(_expected_batches(batched, "train"))
    for dataset in (
        TokenBatchDataset(batched, "train", batches=True, return_tensors="pt"),
        IterableTokenBatches(batched, "train", batches=True, return_tensors="pt"),
    ):
        items = list(DataLoader(dataset, batch_size=None, num_workers=2))
        assert all(isinstance(x["input_ids"], torch.Tensor) for x in items)
        assert all(x["input_ids"].dtype == torch.int64 for x in items)
        assert sorted(_as_pair(x) for x in items) == expected


def test_batches_mode_refuses_files_without_preformed_batches(batches, batched):
    with pytest.raises(
        NoPreformedBatchesError,
        match=r"part-train-00000\.parquet has no 'batch' column \(layout 'packed'.*'bucketed' "
        r"and 'padded' with pad_to 'longest'.*DataLoader\(batch_size=\.\.\.\)",
    ):
        TokenBatchDataset(batches, "train", batches=True)
    # A bucketed file of before the batch column: its layout pads per batch, so say to rewrite.
    original = pq.read_table(batched / "part-train-00001.parquet")
    pq.write_table(original.drop_columns([BATCH]), batched / "part-train-00001.parquet")
    _mark(batched)  # as that release wrote it (else refused as changed since marked)
    with pytest.raises(NoPreformedBatchesError, match=r"'bucketed'.*re-materialize"):
        TokenBatchDataset(batched, "train", batches=True)
    # Rows sharing a batch number but not a length are not one batch: refused naming the file.
    ids = original["input_ids"].to_pylist()
    ids[0] = ids[0] + [1]
    field = original.schema.field("input_ids")
    broken = original.set_column(
        original.schema.get_field_index("input_ids"), field, pa.array(ids, field.type)
    )
    pq.write_table(broken, batched / "part-train-00001.parquet")
    _mark(batched)
    ds = TokenBatchDataset(batched, "train", batches=True)
    with pytest.raises(ValueError, match=r"part-train-00001\.parquet: rows 0-3 share one 'batch'"):
        ds[5]
