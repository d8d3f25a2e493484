"""The dataset reader over training_batches output: items equal the Parquet rows, shards over
ranks and DataLoader workers partition the rows exactly, and mismatched metadata is refused."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.lib.batching import BatchSpec, batch_schema_metadata, pack_sequences
from llm_assets.reader import (
    IterableTokenBatches,
    MetadataMismatchError,
    MixedSourcesError,
    TokenBatchDataset,
    batch_files,
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
    table, _ = pack_sequences(docs, SEQ, 50256, 50256, False, pa.uint16())
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
    with pytest.raises(MetadataMismatchError, match="not an llm_assets batch file"):
        TokenBatchDataset(foreign, "train")
    with pytest.raises(FileNotFoundError):
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
