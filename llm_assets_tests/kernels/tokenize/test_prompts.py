"""SFT rows from a ``prompt_template``: prompt ids first, rows missing a field are rejects."""

from __future__ import annotations

import pyarrow as pa
import pytest

from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table
from llm_assets.kernels.tokenize.tokenizer import TokenizerError
from llm_assets_tests.conftest import docs_table

TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"


def _sft_table(metadata: list[str | None], texts: list[str]) -> pa.Table:
    return docs_table(texts, source="sft.jsonl", metadata=metadata)


def test_prompt_template_puts_prompt_ids_first_and_counts_them():
    spec = TokenizerSpec(prompt_template=TEMPLATE)
    table = _sft_table(['{"instruction": "Add 2 and 3."}'], ["The answer is 5."])
    kept = tokenize_table(table, spec).kept
    tok = spec.build()
    prompt = tok.encode_batch(["### Instruction:\nAdd 2 and 3.\n\n### Response:\n"])[0]
    response = tok.encode_batch(["The answer is 5."])[0]
    assert kept["input_ids"][0].as_py() == prompt + response
    assert kept["prompt_tokens"].to_pylist() == [len(prompt)]
    assert kept["n_tokens"].to_pylist() == [len(prompt) + len(response)]


def test_rows_missing_a_prompt_field_are_rejects_naming_the_field():
    spec = TokenizerSpec(prompt_template=TEMPLATE)
    table = _sft_table(['{"instruction": "Say hi."}', '{"input": "x"}', None], ["Hi.", "a", "b"])
    result = tokenize_table(table, spec)
    assert result.kept["doc_id"].to_pylist() == ["d0"]
    assert result.rejects["reason"].to_pylist() == ["missing_prompt_field"] * 2
    assert result.rejects["value"].to_pylist() == ["instruction"] * 2


def test_bad_prompt_template_is_a_clear_error():
    with pytest.raises(TokenizerError, match="prompt_template"):
        TokenizerSpec(prompt_template="{instruction")
    with pytest.raises(TokenizerError, match="plain names"):
        TokenizerSpec(prompt_template="{0} and {}")
