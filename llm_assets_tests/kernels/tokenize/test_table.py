"""The kernel of ``tokenized_documents``: ids and counts appended to the table."""

from __future__ import annotations

import pyarrow as pa

from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table


def test_kernel_appends_whole_ids_and_counts():
    long_text = "word" + " word" * 4999
    table = pa.table({"text": ["Hello world", "", long_text]})
    kept = tokenize_table(table, TokenizerSpec()).kept
    assert kept.schema.field("input_ids").type == pa.list_(pa.uint16())
    assert kept["n_tokens"].to_pylist() == [2, 0, 5000]
    assert len(kept["input_ids"][2].as_py()) == 5000  # never truncated
    assert kept["input_ids"][0].as_py() == [15496, 995]
