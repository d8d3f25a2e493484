"""Chat-format SFT end to end: conversations in, padded batches whose labels cover each
conversation's last answer only, with every bad conversation a reject at the stage that finds
it. Real Dagster materializations on the in-process and multiprocess backends."""

from __future__ import annotations

import json
import random
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.kernels.schema import make_doc_id
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.orchestration.console import InputFailure
from llm_assets.stages.engine import StageInputError
from llm_assets.warehouse.catalog import Catalog
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import pipeline_run_config

EOS = 50256
SYSTEMS = ["You are a helpful assistant.", "Answer in one short sentence."]
SHORT_TEXT_FILTERS = {
    "min_tokens": 1,
    "quality": {"enabled": False},
    "repetition": {"enabled": False},
    "language": {"languages": []},
}
BAD_LINES = {
    # line: (the conversation, the stage that rejects it, its reason)
    5: ([{"role": "user", "content": "Is anyone there?"}], "ingest", "invalid_chat"),
    9: (None, "ingest", "missing_text"),
    14: (
        [
            {"role": "user", "content": "Repeat after me: <|endoftext|>"},
            {"role": "assistant", "content": "I would rather not repeat that."},
        ],
        "tokenize",
        "special_token_in_chat",
    ),
}


def conversation(rnd: random.Random, i: int) -> list[dict[str, str]]:
    """A short conversation of 1-3 exchanges about arithmetic, maybe with a system prompt."""
    messages = [{"role": "system", "content": rnd.choice(SYSTEMS)}] if rnd.random() < 0.4 else []
    for _ in range(rnd.randint(1, 3)):
        a, b = rnd.randint(1, 999), rnd.randint(1, 999) + i
        messages.append({"role": "user", "content": f"What is {a} plus {b}?"})
        messages.append({"role": "assistant", "content": f"{a} plus {b} is {a + b}."})
    return messages


def write_chats(folder: Path, n: int = 40) -> Path:
    folder.mkdir()
    rnd = random.Random(0)
    lines = []
    for line in range(1, n + 1):
        messages = BAD_LINES[line][0] if line in BAD_LINES else conversation(rnd, line)
        lines.append(json.dumps({"id": line, "messages": messages}))
    (folder / "chats.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def chatml(history: list[dict[str, str]]) -> str:
    """ChatML written out by hand, to check the shipped template against."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in history)
    return turns + "<|im_start|>assistant\n"


def chat_config(folder: Path, **tokenized: object) -> dict:
    return pipeline_run_config(
        folder,
        rows_per_shard=10,
        raw_documents={"chat_field": "messages"},
        normalized_documents={"preset": "none"},
        tokenized_documents=tokenized,
        filtered_documents=SHORT_TEXT_FILTERS,
        training_batches={"layout": "padded", "seq_len": 512},
    )


@pytest.mark.parametrize("backend", ["in_process", "multiprocess"])
def test_conversations_become_batches_that_learn_the_last_answer_only(tmp_path, backend):
    folder = write_chats(tmp_path / "chats")
    root = tmp_path / "wh"
    workers = 2 if backend == "multiprocess" else 0
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(backend=backend, workers=workers),
            "warehouse": WarehouseResource(root=str(root)),
        },
        run_config=chat_config(folder, chat_template="chatml"),
    )
    assert result.success
    assert all(check.passed for check in result.get_asset_check_evaluations())
    catalog = WarehouseResource(root=str(root)).catalog()
    # The UI shows one row as the model trains on it: the prompt, and what is learned.
    (event,) = result.asset_materializations_for_node("tokenized_documents")
    example = event.metadata["sft_example"].value
    prompt_part, learned_part = example.split("**Learned**")
    assert "**Prompt**" in prompt_part and "<|im_start|>assistant\n\n```" in prompt_part
    assert learned_part.rstrip().endswith("<|im_end|>\n```")

    rejects = catalog.query("SELECT source_line, stage, reason FROM rejects ORDER BY source_line")
    assert rejects == [(line, stage, reason) for line, (_, stage, reason) in BAD_LINES.items()]

    records = {
        json.loads(line)["id"]: json.loads(line)["messages"]
        for line in (folder / "chats.jsonl").read_text().splitlines()
    }
    tok = TokenizerSpec().build()
    docs = catalog.query(
        "SELECT f.doc_id, f.source_line, f.prompt, f.prompt_tokens, f.input_ids, b.labels, "
        "b.attention_mask FROM filtered_documents f JOIN training_batches b USING (doc_id)"
    )
    assert len(docs) == 40 - len(BAD_LINES)
    for _, line, prompt, prompt_tokens, ids, labels, mask in docs:
        *history, answer = records[line]
        assert prompt == chatml(history)
        # The answer, learned with ChatML's end of a turn (plain text with GPT-2).
        learned = prompt + answer["content"] + "<|im_end|>"
        prompt_ids, joined = tok.encode_batch([prompt, learned])
        answer_ids = joined[len(prompt_ids) :]
        assert prompt_tokens == len(prompt_ids)
        assert list(ids) == prompt_ids + answer_ids
        n = len(ids) + 1  # the learned EOS after the answer
        assert labels[:prompt_tokens] == [-100] * prompt_tokens
        assert labels[prompt_tokens:n] == [*answer_ids, EOS]
        assert labels[n:] == [-100] * (len(labels) - n) and sum(mask) == n


def materialize_in_process(config: dict, root: Path) -> tuple[dg.ExecuteInProcessResult, Catalog]:
    """The pipeline with ``config`` in process, into a warehouse at ``root``: it succeeds."""
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config=config,
    )
    assert result.success
    return result, WarehouseResource(root=str(root)).catalog()


def materialize_every_answer(
    folder: Path, root: Path, **batches: object
) -> tuple[dg.ExecuteInProcessResult, Catalog]:
    """The pipeline over ``folder`` with ``chat_answers: every`` and ChatML, in process."""
    config = chat_config(folder, chat_template="chatml")
    config["ops"]["raw_documents"]["config"]["chat_answers"] = "every"
    config["ops"]["training_batches"]["config"].update(batches)
    return materialize_in_process(config, root)


def test_chat_answers_every_learns_each_answer_in_its_own_row(tmp_path):
    """``chat_answers: every``: a conversation of three exchanges is three rows, each prompted
    with the whole conversation before its answer (earlier answers included) and learning that
    answer; the conversation's last answer keeps the id it has with ``last``."""
    folder = write_chats(tmp_path / "chats")
    _, catalog = materialize_every_answer(folder, tmp_path / "wh")
    rejects = catalog.query("SELECT source_line, stage, reason FROM rejects ORDER BY source_line")
    assert rejects == [(line, stage, reason) for line, (_, stage, reason) in BAD_LINES.items()]
    expected = set()
    for line in (folder / "chats.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["id"] in BAD_LINES:
            continue
        messages = record["messages"]
        for k, message in enumerate(messages):
            if message["role"] == "assistant":
                last = k == len(messages) - 1
                doc_id = make_doc_id("chats.jsonl", record["id"], None if last else k + 1)
                expected.add((doc_id, record["id"], chatml(messages[:k]), message["content"]))
    assert len(expected) > 37  # more rows than conversations
    docs = catalog.query(
        "SELECT f.doc_id, f.source_line, f.prompt, f.text, f.prompt_tokens, b.labels "
        "FROM filtered_documents f JOIN training_batches b USING (doc_id)"
    )
    assert {row[:4] for row in docs} == expected
    tok = TokenizerSpec().build()
    for _, _, prompt, text, prompt_tokens, labels in docs:
        learned = tok.encode_batch([prompt + text + "<|im_end|>"])[0][prompt_tokens:]
        assert labels[prompt_tokens : prompt_tokens + len(learned) + 1] == [*learned, EOS]


def test_every_answer_of_long_conversations_survives_dedup_and_shares_a_split(tmp_path):
    """With ``chat_answers: every`` a long conversation's rows are nested (each one's prompt holds
    the ones before): near-dedup does not take them for duplicates of each other, and all the
    rows of a conversation go to one split, so no validation answer is a training prompt."""
    rnd = random.Random(1)
    words = [f"w{i}" for i in range(3000)]
    folder = tmp_path / "long"
    folder.mkdir()
    lines = []
    for record in range(24):
        messages = []
        for _ in range(8):
            question = " ".join(rnd.choices(words, k=30))
            messages += [
                {"role": "user", "content": f"Explain {question}."},
                {"role": "assistant", "content": " ".join(rnd.choices(words, k=40)) + "."},
            ]
        lines.append(json.dumps({"id": record, "messages": messages}))
    (folder / "long.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result, catalog = materialize_every_answer(
        folder, tmp_path / "wh", seq_len=2048, validation_fraction=0.4
    )
    assert catalog.query("SELECT count(*) FROM rejects") == [(0,)]
    assert catalog.query("SELECT count(*) FROM filtered_documents") == [(24 * 8,)]
    (event,) = result.asset_materializations_for_node("training_batches")
    batches = Path(event.metadata["folder"].value)
    line_of = dict(catalog.query("SELECT doc_id, source_line FROM filtered_documents"))
    splits: dict[int, set[str]] = {}
    for split in ("train", "validation"):
        for path in batches.glob(f"part-{split}-*.parquet"):
            for doc_id in pq.read_table(path, columns=["doc_id"])["doc_id"].to_pylist():
                splits.setdefault(line_of[doc_id], set()).add(split)
    assert len(splits) == 24 and all(len(s) == 1 for s in splits.values())
    assert {"train", "validation"} == set().union(*splits.values())


SEQ_LEN = 48


def test_chat_answers_all_learns_every_answer_in_one_row_per_conversation(tmp_path):
    """``chat_answers: all``: one row per conversation, as with ``last``, whose labels cover
    every answer with its ``<|im_end|>`` and the EOS after the last, the rest masked; the spans
    are in SQL (``learned_spans``) and the UI's example shows the parts. Cut to 48 tokens, a row
    is kept while an answer starts before the cut (most rows' last prompt is longer: ``last``
    would reject them), else it is a ``prompt_fills_sequence`` reject (a system prompt and a
    question fill it)."""
    folder = write_chats(tmp_path / "chats")
    config = chat_config(folder, chat_template="chatml")
    config["ops"]["raw_documents"]["config"]["chat_answers"] = "all"
    config["ops"]["training_batches"]["config"]["seq_len"] = SEQ_LEN
    result, catalog = materialize_in_process(config, tmp_path / "wh")
    (event,) = result.asset_materializations_for_node("tokenized_documents")
    example = event.metadata["sft_example"].value
    assert "**Masked**" in example and example.count("**Learned**") > 1

    tok = TokenizerSpec().build()
    cut_prompts = 0
    expected: dict[int, tuple[int, list[int]]] = {}
    expected_rejects = [(line, reason) for line, (_, _, reason) in BAD_LINES.items()]
    for line in (folder / "chats.jsonl").read_text().splitlines():
        messages = json.loads(line)["messages"]
        if json.loads(line)["id"] in BAD_LINES:
            continue
        # The row's ids: the prompt's, then the last answer's with its <|im_end|>; each answer
        # learned from its first token to its <|im_end|> (ChatML's joins are GPT-2 word ends).
        ids = tok.encode_batch([chatml(messages[:-1])])[0]
        ids += tok.encode_batch([chatml(messages)[: -len("\n<|im_start|>assistant\n")]])[0][
            len(ids) :
        ]
        learned = [False] * len(ids)
        for k, message in enumerate(messages):
            if message["role"] == "assistant":
                start = len(tok.encode_batch([chatml(messages[:k])])[0])
                turn = chatml(messages[: k + 1])[: -len("\n<|im_start|>assistant\n")]
                end = len(tok.encode_batch([turn])[0])
                learned[start:end] = [True] * (end - start)
        labels = [t if keep else -100 for t, keep in zip(ids, learned, strict=True)] + [EOS]
        if learned.index(True) >= min(len(ids) + 1, SEQ_LEN):
            expected_rejects.append((json.loads(line)["id"], "prompt_fills_sequence"))
        else:
            answers = sum(m["role"] == "assistant" for m in messages)
            expected[json.loads(line)["id"]] = (answers, labels[:SEQ_LEN])
            cut_prompts += len(tok.encode_batch([chatml(messages[:-1])])[0]) >= SEQ_LEN
    rejects = catalog.query("SELECT source_line, reason FROM rejects ORDER BY source_line")
    assert rejects == sorted(expected_rejects)
    assert len(rejects) > len(BAD_LINES) + 5 and cut_prompts > 10
    values = catalog.query(
        "SELECT value FROM rejects WHERE reason = 'prompt_fills_sequence' ORDER BY source_line"
    )
    # where the first answer starts, when it is not after the whole prompt (one answer)
    assert all(v.endswith(f" tokens kept (seq_len {SEQ_LEN})") for (v,) in values)
    assert {v.split(" ")[0] for (v,) in values} == {"first", "prompt"}, values[:3]
    docs = catalog.query(
        "SELECT f.source_line, len(f.learned_spans), b.labels "
        "FROM filtered_documents f JOIN training_batches b USING (doc_id)"
    )
    assert len(docs) == len(expected) > 20
    for line, n_spans, labels in docs:
        answers, expected_labels = expected[line]
        assert n_spans == answers
        assert labels == expected_labels + [-100] * (SEQ_LEN - len(expected_labels))
    assert max(n for _, n, _ in docs) == 3


def test_a_custom_template_and_its_errors_are_rejects_of_their_rows(tmp_path):
    folder = write_chats(tmp_path / "chats", n=20)
    template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('no system prompts here') }}{% endif %}"
        "[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}[ASSISTANT] "
    )
    root = tmp_path / "wh"
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config=chat_config(folder, chat_template=template),
    )
    assert result.success
    catalog = WarehouseResource(root=str(root)).catalog()
    errors = catalog.query(
        "SELECT value, count(*) FROM tokenized_documents_rejects "
        "WHERE reason = 'chat_template_error' GROUP BY value"
    )
    with_system = sum(
        1
        for line in (folder / "chats.jsonl").read_text().splitlines()
        if (m := json.loads(line)["messages"]) and m[0]["role"] == "system"
    )
    assert errors == [("no system prompts here", with_system)] and with_system > 0
    prompts = [p for (p,) in catalog.query("SELECT prompt FROM tokenized_documents")]
    assert prompts and all(p.startswith("[USER] What is ") for p in prompts)
    assert all(p.endswith("[ASSISTANT] ") for p in prompts)
    # The template writes "[ASSISTANT] " after every conversation: after the answer, that is the
    # next turn's header, not learned; the answer is.
    tok = TokenizerSpec().build()
    rows = catalog.query("SELECT text, prompt_tokens, input_ids FROM tokenized_documents")
    for text, prompt_tokens, ids in rows:
        assert list(ids)[prompt_tokens:] == tok.encode_batch([text])[0]


def test_chat_field_without_a_chat_template_is_refused_before_any_work(tmp_path):
    folder = write_chats(tmp_path / "chats", n=5)
    root = tmp_path / "wh"
    refused = [
        (chat_config(folder), "chat_template is not set"),
        (
            pipeline_run_config(folder, raw_documents={"chat_answers": "every"}),
            "raw_documents: chat_answers applies to conversations: set chat_field",
        ),
    ]
    for config, message in refused:
        # The asset reports an input error as an InputFailure (short on the console), its
        # cause the stage's StageInputError.
        with pytest.raises(InputFailure, match=message) as error:
            dg.materialize(
                PIPELINE_ASSET_DEFS,
                resources={
                    "compute": ComputeResource(),
                    "warehouse": WarehouseResource(root=str(root)),
                },
                run_config=config,
            )
        assert isinstance(error.value.__cause__, StageInputError)
        assert not (root / "raw_documents").exists()


def test_a_chat_field_the_records_lack_fails_raw_documents_naming_the_setting(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"text": "hello there", "id": 1}\n' * 3)
    with pytest.raises(InputFailure, match=r"raw_documents.config.chat_field\)") as error:
        dg.materialize(
            PIPELINE_ASSET_DEFS,
            resources={
                "compute": ComputeResource(),
                "warehouse": WarehouseResource(root=str(tmp_path / "wh")),
            },
            run_config=chat_config(folder, chat_template="chatml"),
        )
    assert "no field 'messages' (fields: text, id)" in str(error.value)
    assert isinstance(error.value.__cause__, StageInputError)


def test_tool_calling_conversations_learn_their_calls_end_to_end(tmp_path):
    """OpenAI's format with tools, through Dagster with a tokenizer folder carrying Qwen2.5's
    own template (``chat_template: tokenizer``) and ``chat_answers: all``: every row's labels
    cover each call as Qwen writes it, in ``<tool_call>`` tags, and each answer in text, each
    with ``<|im_end|>``; the tools are in every prompt; nothing is rejected."""
    from llm_assets_tests.conftest import gpt2_folder
    from llm_assets_tests.kernels.tokenize.test_chat_tools import QWEN25, TOOLS

    tokenizer = gpt2_folder(tmp_path / "tok", ["<|im_start|>", "<|im_end|>"], special=True)
    gpt2_folder(tokenizer, ["<tool_call>", "</tool_call>"], special=False)
    (tokenizer / "chat_template.jinja").write_text(QWEN25, encoding="utf-8")
    folder = tmp_path / "tools"
    folder.mkdir()
    cities = ["Paris", "Rome", "Lima", "Oslo", "Cairo", "Quito", "Hanoi", "Dakar"]
    expected = {}
    lines = []
    for line in range(1, 25):
        messages, learned = [], []
        for turn in range(1 + line % 2):
            city, temp = cities[(line + turn) % len(cities)], 10 + line + turn
            arguments = json.dumps({"city": city})
            call = {"id": f"c{line}x{turn}", "type": "function"}
            call["function"] = {"name": "get_weather", "arguments": arguments}
            answer = f"It is {temp} degrees in {city}."
            messages += [
                {"role": "user", "content": f"Weather in {city}, please?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"t": temp})},
                {"role": "assistant", "content": answer},
            ]
            learned += [
                f'<tool_call>\n{{"name": "get_weather", "arguments": {arguments}}}\n</tool_call>'
                "<|im_end|>",
                answer + "<|im_end|>",
            ]
        expected[line] = learned
        lines.append(json.dumps({"messages": messages, "tools": TOOLS}))
    (folder / "tools.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = pipeline_run_config(
        folder,
        rows_per_shard=10,
        raw_documents={"chat_field": "messages", "chat_answers": "all"},
        normalized_documents={"preset": "none"},
        tokenized_documents={"tokenizer": str(tokenizer), "chat_template": "tokenizer"},
        # the generated conversations differ in a city and a number: near duplicates
        filtered_documents={**SHORT_TEXT_FILTERS, "dedup": {"near": False}},
        training_batches={"layout": "padded", "seq_len": 1024},
    )
    _, catalog = materialize_in_process(config, tmp_path / "wh")
    assert catalog.query("SELECT stage, reason, value FROM rejects LIMIT 3") == []
    # chat warehouses of before tool calls were read (their rejects) are not reused
    (raw_config,) = catalog.query(
        "SELECT config FROM materializations WHERE asset = 'raw_documents'"
    )[0]
    assert json.loads(raw_config)["chat_reader"] == 2
    tok = TokenizerSpec(name=str(tokenizer)).build()
    rows = catalog.query(
        "SELECT f.source_line, f.prompt, b.input_ids, b.labels "
        "FROM filtered_documents f JOIN training_batches b USING (doc_id)"
    )
    assert len(rows) == 24
    for line, prompt, ids, labels in rows:
        assert prompt.startswith("<|im_start|>system\n") and '"name": "get_weather"' in prompt
        parts, run = [], []
        for token, label in zip(ids, labels, strict=True):
            if label != -100:
                run.append(token)
            elif run:
                parts.append(tok.decode(run))
                run = []
        parts += [tok.decode(run)] if run else []
        # the last answer's EOS is the batches' own (here <|endoftext|>, GPT-2's)
        assert [*parts[:-1], parts[-1].removesuffix("<|endoftext|>")] == expected[line]
