"""``chat_answers: all``: one row per conversation that learns every answer where it stands.

Ingest marks each earlier assistant message ``"weight": 1`` (learned) or 0 (context);
``tokenize_table`` finds where the template writes each learned answer in the rendered prompt
and gives the row ``learned_spans``: each answer with its turn's end, then the last answer. The
reference is transformers' own assistant mask (``{% generation %}`` templates); templates that
write an earlier answer otherwise than a last one (Qwen3, DeepSeek-R1, Phi-3.5) are found too,
and a template that hides where it writes an answer makes its row a reject saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from llm_assets.kernels.tokenize.chat_template import CHATML_TEMPLATE
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table
from llm_assets_tests.conftest import docs_table, gpt2_folder

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help?", "weight": 1},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "Four, I think.", "weight": 0},
    {"role": "user", "content": "And 3+3?"},
]
ANSWER = "It is 6."


def _table(histories: list[list[dict]], answers: list[str]) -> pa.Table:
    metadata = [json.dumps({"messages": history}) for history in histories]
    return docs_table(answers, source="chat.jsonl", metadata=metadata)


def _learned_texts(spec: TokenizerSpec, row: dict) -> list[str]:
    tok = spec.build()
    return [tok.decode(row["input_ids"][s["start"] : s["end"]]) for s in row["learned_spans"]]


@pytest.mark.parametrize("engine", ["tiktoken", "hf"])
def test_answers_of_weight_1_are_learned_with_their_turns_end(engine):
    spec = TokenizerSpec(engine=engine, chat_template="chatml")
    result = tokenize_table(_table([CONVERSATION], [ANSWER]), spec)
    assert result.rejects.num_rows == 0
    (row,) = result.kept.to_pylist()
    # weight 0 stays context; the spans are in order, the last one the row's own answer
    assert _learned_texts(spec, row) == ["Hello! How can I help?<|im_end|>", "It is 6.<|im_end|>"]
    assert row["learned_spans"][-1] == {"start": row["prompt_tokens"], "end": row["n_tokens"]}
    assert row["prompt"].count("Four, I think.<|im_end|>") == 1


GENERATION_CHATML = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML whose answers transformers can mask: ``return_assistant_tokens_mask`` marks the tokens
written inside ``{% generation %}``, TRL's ``assistant_only_loss``."""


def test_the_learned_tokens_are_transformers_assistant_mask(tmp_path: Path):
    """Every answer learned (``weight`` 1 everywhere): the row's ids and learned tokens are what
    transformers gives for the whole conversation with its assistant mask (the row ends with the
    last answer's turn, before any separator the template writes after it)."""
    folder = gpt2_folder(tmp_path / "tok", ["<|im_start|>", "<|im_end|>"], special=True)
    history = [
        {**m, "weight": 1} if m["role"] == "assistant" else m
        for m in CONVERSATION
        if m.get("weight") != 0
    ]
    history.insert(3, {"role": "user", "content": "  spaced  out  "})
    spec = TokenizerSpec(name=str(folder), chat_template=GENERATION_CHATML)
    (row,) = tokenize_table(_table([history], [ANSWER]), spec).kept.to_pylist()
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    messages = [{"role": m["role"], "content": m["content"]} for m in history]
    out = reference.apply_chat_template(
        [*messages, {"role": "assistant", "content": ANSWER}],
        chat_template=GENERATION_CHATML,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    n = len(row["input_ids"])
    assert row["input_ids"] == ids[:n] and not reference.decode(ids[n:]).strip()
    learned = [0] * n
    for span in row["learned_spans"]:
        learned[span["start"] : span["end"]] = [1] * (span["end"] - span["start"])
    assert learned == mask[:n] and sum(learned) == sum(mask)


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory) -> Path:
    """GPT-2 with Qwen's ChatML tokens (special) and think tags (markup, not special)."""
    folder = tmp_path_factory.mktemp("qwen3")
    gpt2_folder(folder, ["<|im_start|>", "<|im_end|>"], special=True)
    return gpt2_folder(folder, ["<think>", "</think>"], special=False)


QWEN3_LIKE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "{% set content = m['content'] %}{% set reasoning = '' %}"
    "{% if '</think>' in content %}"
    "{% set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "<|im_start|>assistant\n"
    "{% if loop.last %}<think>\n{{ reasoning }}\n</think>\n\n{% endif %}"
    "{{ content }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen3's way: an earlier answer loses its reasoning, the last one is written with a think
block (empty when it has none)."""


def test_an_earlier_answer_without_its_reasoning_is_learned_as_written(qwen3_folder: Path):
    """Qwen3 writes an earlier answer without its reasoning (and without the think block a last
    answer gets): the learned tokens are the answer as the prompt holds it and its turn's end.
    The prompt is transformers' rendering: the think tags (tokens of their own) are checked
    not to be written, but the template renders the messages as they are."""
    history = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\nIt is 4.", "weight": 1},
        {"role": "user", "content": "And 3+3?"},
    ]
    spec = TokenizerSpec(name=str(qwen3_folder), chat_template=QWEN3_LIKE)
    (row,) = tokenize_table(_table([history], [ANSWER]), spec).kept.to_pylist()
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(qwen3_folder), local_files_only=True)
    messages = [{"role": m["role"], "content": m["content"]} for m in history]
    rendered = reference.apply_chat_template(
        messages, chat_template=QWEN3_LIKE, add_generation_prompt=True, tokenize=False
    )
    assert row["prompt"] == rendered
    assert "<|im_start|>assistant\nIt is 4.<|im_end|>" in row["prompt"]
    assert _learned_texts(spec, row) == [
        "It is 4.<|im_end|>",
        "<think>\n\n</think>\n\nIt is 6.<|im_end|>",
    ]


def test_an_answer_the_template_writes_as_nothing_is_not_learned(qwen3_folder: Path):
    """An earlier answer that is only reasoning is written as nothing but its turn's end by
    Qwen3 (which drops an earlier answer's reasoning): nothing of it is learned (its turn's end
    alone would teach an empty reply), the row is kept. An answer holding the private-use
    character that marks answers is found with another."""
    history = [
        {"role": "user", "content": "Think first."},
        {"role": "assistant", "content": "<think>\nhmm\n</think>", "weight": 1},
        {"role": "user", "content": "Now answer: what is \ue002?"},
        {"role": "assistant", "content": "A private-use character: \ue002.", "weight": 1},
        {"role": "user", "content": "Thanks."},
    ]
    spec = TokenizerSpec(name=str(qwen3_folder), chat_template=QWEN3_LIKE)
    result = tokenize_table(_table([history], [ANSWER]), spec)
    assert result.rejects.num_rows == 0
    (row,) = result.kept.to_pylist()
    assert "<|im_start|>assistant\n<|im_end|>" in row["prompt"]
    assert _learned_texts(spec, row) == [
        "A private-use character: \ue002.<|im_end|>",
        "<think>\n\n</think>\n\nIt is 6.<|im_end|>",
    ]


DEEPSEEK_LIKE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}<|User|>{{ m['content'] }}"
    "{% else %}<|Assistant|>{{ m['content'].split('</think>')[-1] }}<|endoftext|>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|Assistant|><think>\n{% endif %}"
)
"""DeepSeek-R1's way: the generation prompt opens a think block that an answer's own rendering
does not write, so an answer's turn's end is found from the conversation ending with it."""
PHI35_LIKE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% else %}{{ eos_token }}{% endif %}"
)
"""Phi-3.5's way: a conversation without a generation prompt ends with EOS, which an earlier
answer's turn does not have."""


@pytest.mark.parametrize(
    ("template", "first", "last"),
    [
        (DEEPSEEK_LIKE, "Hello! How can I help?<|endoftext|>", "It is 6."),
        (PHI35_LIKE, "Hello! How can I help?<|end|>", "It is 6.<|end|>\n"),
    ],
)
def test_a_turns_end_is_found_when_the_template_writes_a_last_answer_otherwise(
    template, first, last
):
    """The learned tokens of the last answer are as with ``chat_answers: last`` (DeepSeek's
    template does not continue its generation prompt: the answer alone; a final EOS is the
    batches'); an earlier answer learns the turn's end the template writes after it there."""
    spec = TokenizerSpec(chat_template=template)
    history = [m for m in CONVERSATION if m["role"] != "system"]
    result = tokenize_table(_table([history], [ANSWER]), spec)
    assert result.rejects.num_rows == 0
    (row,) = result.kept.to_pylist()
    assert _learned_texts(spec, row) == [first, last]


TWICE = CHATML_TEMPLATE.replace(
    "{{ message['content'] }}",
    "{{ message['content'] }}{% if not loop.last %} (again: {{ message['content'] }}){% endif %}",
)
"""Writes an answer twice inside a conversation, once when it is the last: which copy is the one
to learn cannot be told."""


def test_rows_whose_answers_cannot_be_found_or_whose_weights_are_wrong_are_rejects():
    """A template that writes an earlier answer twice hides which copy to learn: the row is a
    ``chat_template_error`` reject that says to use ``every``. A weight other than 0 or 1, or a
    learned message that is not an answer, is a ``missing_prompt_field`` reject naming it (the
    messages come from the metadata). Rows without earlier answers to learn are kept."""
    assert "message['content']" in CHATML_TEMPLATE
    spec = TokenizerSpec(chat_template=TWICE)
    plain = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in CONVERSATION]
    result = tokenize_table(_table([CONVERSATION, plain], [ANSWER, ANSWER]), spec)
    assert result.kept["doc_id"].to_pylist() == ["d1"]
    (reject,) = result.rejects.to_pylist()
    assert reject["reason"] == "chat_template_error"
    assert reject["value"] == (
        "message 3 (assistant), an answer to learn, is not found where the template writes the "
        "conversation (it writes it twice, or otherwise than last): chat_answers: every learns "
        "it in a row of its own"
    )

    heavy = [{**m, "weight": 2} if m["role"] == "assistant" else m for m in CONVERSATION]
    asked = [{**m, "weight": 1} if m["role"] == "user" else m for m in CONVERSATION]
    result = tokenize_table(
        _table([heavy, asked], [ANSWER, ANSWER]), TokenizerSpec(chat_template="chatml")
    )
    assert result.rejects["reason"].to_pylist() == ["missing_prompt_field"] * 2
    assert result.rejects["value"].to_pylist() == [
        "messages (message 3's weight 2 is not 0 or 1)",
        "messages (message 2 (user) has weight 1: only assistant messages are learned)",
    ]
