"""Batch rows decoded to text: the masked part (label -100) marked, padding counted."""

from __future__ import annotations

from llm_assets.assets.reporting.examples import (
    LEARNED,
    MASKED,
    PADDING,
    _clip,
    batch_tokenizer,
    decoded_row_markdown,
    position_kinds,
)
from llm_assets.kernels.tokenize.spec import TokenizerSpec


def test_positions_are_runs_of_padding_masked_and_learned():
    runs = position_kinds([5, 6, 7, 8, 0, 0], [1, 1, 1, 1, 0, 0], [-100, -100, 7, 8, -100, -100])
    assert runs == [(MASKED, 0, 2), (LEARNED, 2, 4), (PADDING, 4, 6)]
    assert position_kinds([1, 2], None, None) == [(LEARNED, 0, 2)]


def test_an_sft_row_shows_its_prompt_in_italics_and_its_answer_upright():
    tok = TokenizerSpec().build()
    prompt, answer = tok.encode_batch(["Question: is *x* ok?\nAnswer:", " yes"])
    ids = [*prompt, *answer, tok.eos_id, tok.pad_id, tok.pad_id]
    n = len(prompt)
    labels = [-100] * n + ids[n:-2] + [-100, -100]
    mask = [1] * (len(ids) - 2) + [0, 0]
    text = decoded_row_markdown({"input_ids": ids, "attention_mask": mask, "labels": labels}, tok)
    head, quote = text.split("\n\n")
    assert head == f"{len(ids)} positions: {len(answer) + 1} learned, {n} masked, 2 padding"
    # A line per part, hard line breaks between: masked in italics (its own * escaped), the
    # learned answer upright with EOS written out, then the padding's count.
    assert quote.split("\\\n") == [
        r"> *Question: is \*x\* ok?↵Answer:*",
        r">  yes&lt;\|endoftext\|&gt;",
        "> *[2 padding]*",
    ]


def test_a_long_row_keeps_its_start_and_its_end():
    parts = [(MASKED, "p" * 100), (LEARNED, "a" * 500 + "END")]
    clipped = _clip(parts, 90)
    assert clipped[0] == (MASKED, "p" * 60)
    assert clipped[1] == ("cut", "…")
    assert clipped[-1][1].endswith("END") and sum(len(t) for _, t in clipped[2:]) == 30
    assert _clip(parts, 1000) == parts


def test_the_batches_tokenizer_is_rebuilt_only_when_it_is_the_same():
    tok = TokenizerSpec().build()
    assert batch_tokenizer("gpt2", tok.fingerprint) is not None
    assert batch_tokenizer("gpt2", "another") is None
    assert batch_tokenizer("/no/such/tokenizer.json", tok.fingerprint) is None
