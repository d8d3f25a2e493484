"""Ingest of chat rows (``chat_field``): every format that can hold a conversation, and what
happens to each kind of bad conversation.

A kept chat row's text is its last message, the assistant's answer; the messages before it are
in its metadata as ``messages`` (``{"role", "content"}`` objects), beside the record's other
fields. Every row is kept or rejected with its reason and line, as for text rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.kernels.ingest.chat import ChatError, chat_answers, chat_turns
from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.ingest.records import (
    INVALID_CHAT,
    MALFORMED_RECORD,
    MISSING_TEXT,
    NON_STRING_TEXT,
)
from llm_assets.kernels.schema import CHAT_MESSAGES, make_doc_id
from llm_assets.stages.engine import spec_fields

CHAT = IngestSpec(chat_field="messages")
HISTORY = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3 + 3?"},
]
CONVERSATION = [*HISTORY, {"role": "assistant", "content": "6"}]


def read(path: Path, spec: IngestSpec = CHAT, **kw) -> tuple[pa.Table, pa.Table]:
    results = list(read_documents(str(path), path.name, spec, **kw))
    return (
        pa.concat_tables([r.kept for r in results]),
        pa.concat_tables([r.rejects for r in results]),
    )


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def located(rejects: pa.Table) -> list[tuple[int, str]]:
    lines, reasons = rejects["source_line"].to_pylist(), rejects["reason"].to_pylist()
    return list(zip(lines, reasons, strict=True))


def metadata(kept: pa.Table) -> list[dict]:
    return [json.loads(m) for m in kept["metadata"].to_pylist()]


def test_the_last_assistant_message_is_the_text_and_the_rest_goes_to_metadata(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": 7, "messages": CONVERSATION}])
    kept, rejects = read(path)
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == ["6"]
    assert kept["source_line"].to_pylist() == [1]
    # the other fields stay; every earlier turn, the assistant's "4" included, is context
    assert metadata(kept) == [{"id": 7, CHAT_MESSAGES: HISTORY}]


def test_sharegpt_messages_and_text_parts_are_read(tmp_path):
    sharegpt = [
        {"from": "system", "value": "Be kind."},
        {"from": "human", "value": "Hi"},
        {"from": "gpt", "value": "Hello!"},
    ]
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Two "}, {"type": "text", "text": "parts"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Joined."}]},
    ]
    path = write_jsonl(
        tmp_path / "c.jsonl", [{"conversations": sharegpt}, {"conversations": parts}]
    )
    kept, rejects = read(path, IngestSpec(chat_field="conversations"))
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == ["Hello!", "Joined."]
    assert [m[CHAT_MESSAGES] for m in metadata(kept)] == [
        [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "Two parts"}],
    ]


# Each kind of bad conversation, and what it becomes: (value of the chat field, reason, words of
# the reject's value).
BAD = [
    ([{"role": "user", "content": "Q"}], INVALID_CHAT, "is from 'user', not 'assistant'"),
    ([], INVALID_CHAT, "an empty list of messages"),
    ({"role": "assistant", "content": "A"}, INVALID_CHAT, "not a list of messages but dict"),
    (["hi", {"role": "assistant", "content": "A"}], INVALID_CHAT, "message 1 is not an object"),
    ([{"role": "assistant", "text": "A"}], INVALID_CHAT, "message 1 has no 'role' and 'content'"),
    ([{"role": 1, "content": "A"}], INVALID_CHAT, "message 1's role is not a string but int"),
    ([{"role": "assistant", "content": None}], INVALID_CHAT, "content of null, not a string"),
    (
        [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}],
        INVALID_CHAT,
        "content of list, not text parts only",
    ),
    ("[not json", INVALID_CHAT, "a string that is not a JSON list of messages"),
    ([{"role": "assistant", "content": []}], INVALID_CHAT, "content of list, not a string"),
    # a role a template may turn into markup (Phi-3 writes <|{role}|>: "end" would be <|end|>)
    (
        [{"role": "end", "content": "x"}, {"role": "assistant", "content": "A"}],
        INVALID_CHAT,
        "role 'end' is not one of system, developer, user, assistant",
    ),
    # tool calls a template cannot write as they were meant
    *(
        (
            [
                {"role": "user", "content": "6 x 7?", **user},
                {"role": "assistant", "content": None, **assistant},
                {"role": "tool", "content": "42"},
                {"role": "assistant", "content": "It is 42."},
            ],
            INVALID_CHAT,
            words,
        )
        for user, assistant, words in [
            (
                {},
                {"function_call": {"name": "calc", "arguments": "{}"}},
                "message 2 (assistant) has function_call, OpenAI's deprecated form of a call",
            ),
            (
                {"tool_calls": [{"function": {"name": "calc"}}]},
                {},
                "message 1 (user) has tool_calls: only the assistant's messages call tools",
            ),
            (
                {},
                {"tool_calls": [{"function": {"name": "calc", "arguments": "{x: 6}"}}]},
                "tool call 1 (calc) has arguments that are not JSON",
            ),
            (
                {},
                {"tool_calls": [{"function": {"name": "calc", "arguments": "[6, 7]"}}]},
                "tool call 1 (calc) has arguments of list, not an object",
            ),
            ({}, {"tool_calls": [{"type": "function"}]}, "tool call 1 has no function name"),
            ({}, {"tool_calls": {"name": "calc"}}, "has tool_calls of dict, not a list"),
            ({}, {"tool_calls": "calc(6, 7)"}, "has tool_calls that are not JSON"),
        ]
    ),
    # OpenAI's weights are 0 or 1, on assistant messages: "0" (a string) must not be learned
    *(
        (
            [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "weight": w}],
            INVALID_CHAT,
            f"message 2 (assistant) has weight {json.dumps(w)}: a weight is 0 (not learned) or 1",
        )
        for w in ("0", 2, 0.5, -1, True)
    ),
    (
        [{"role": "user", "content": "Q", "weight": 1}, {"role": "assistant", "content": "A"}],
        INVALID_CHAT,
        "message 1 (user) has weight 1: only assistant messages are learned",
    ),
    (None, MISSING_TEXT, "null"),
]


@pytest.mark.parametrize(("value", "reason", "words"), BAD)
def test_each_bad_conversation_is_a_reject_saying_what_is_wrong(tmp_path, value, reason, words):
    good = {"messages": CONVERSATION}
    path = write_jsonl(tmp_path / "c.jsonl", [good, {"messages": value}, good])
    kept, rejects = read(path)
    assert kept["source_line"].to_pylist() == [1, 3]
    assert rejects["source_line"].to_pylist() == [2]
    assert rejects["reason"].to_pylist() == [reason]
    assert words in rejects["value"][0].as_py()
    assert rejects["sample"][0].as_py().startswith('{"messages"')


def test_both_formats_in_one_schema_read_the_pair_that_is_not_null(tmp_path):
    """Data sets concatenating OpenAI-style and ShareGPT-style rows give every message all four
    keys, the unused pair null (Parquet structs always have every field)."""
    struct = pa.struct([(k, pa.string()) for k in ("role", "content", "from", "value")])
    column = pa.array(
        [
            [
                {"role": None, "content": None, "from": "human", "value": "Hi"},
                {"role": None, "content": None, "from": "gpt", "value": "Hello"},
            ],
            [
                {"role": "user", "content": "Q", "from": None, "value": None},
                {"role": "assistant", "content": "A", "from": None, "value": None},
            ],
        ],
        pa.list_(struct),
    )
    pq.write_table(pa.table({"messages": column}), tmp_path / "c.parquet")
    kept, rejects = read(tmp_path / "c.parquet")
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == ["Hello", "A"]
    assert [m[CHAT_MESSAGES] for m in metadata(kept)] == [
        [{"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "Q"}],
    ]


def test_a_map_column_is_named_in_the_reject(tmp_path):
    maps = pa.array(
        [[[("role", "user"), ("content", "Q")], [("role", "assistant"), ("content", "A")]]],
        pa.list_(pa.map_(pa.string(), pa.string())),
    )
    pq.write_table(pa.table({"messages": maps}), tmp_path / "m.parquet")
    _, rejects = read(tmp_path / "m.parquet")
    assert rejects["reason"].to_pylist() == [INVALID_CHAT]
    assert "not an object but list (in Parquet: a map column's key-value pairs)" in (
        rejects["value"][0].as_py()
    )


def test_empty_tool_calls_capitalized_roles_and_weights(tmp_path):
    """Only a value holding a call is one (Parquet gives every message every field: a struct of
    nulls; some exports write "[]"); roles are read case-insensitively; an answer of weight 0
    (OpenAI's format: not to be learned) leaves nothing to learn."""
    no_calls = [
        {"role": "User", "content": "Q", "function_call": {"name": None, "arguments": None}},
        {"role": "Assistant", "content": "A", "tool_calls": "[]"},
    ]
    calls = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": '[{"id": "1"}]'},
        {"role": "tool", "content": "1"},
        {"role": "assistant", "content": "A"},
    ]
    weightless = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "weight": 0},
    ]
    learned = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "weight": 1}]
    path = write_jsonl(
        tmp_path / "c.jsonl", [{"messages": m} for m in (no_calls, calls, weightless, learned)]
    )
    kept, rejects = read(path)
    assert kept["source_line"].to_pylist() == [1, 4]
    assert metadata(kept)[0][CHAT_MESSAGES] == [{"role": "user", "content": "Q"}]
    assert located(rejects) == [(2, INVALID_CHAT), (3, INVALID_CHAT)]
    assert "tool call 1 has no function name" in rejects["value"][0].as_py()
    assert "has weight 0" in rejects["value"][1].as_py()


def test_an_absent_chat_field_names_it_and_the_fields_there_are(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "plain", "id": 1}])
    _, rejects = read(path)
    assert rejects["reason"].to_pylist() == [MISSING_TEXT]
    assert rejects["value"].to_pylist() == ["no field 'messages' (fields: text, id)"]


def test_a_messages_field_beside_another_chat_field_is_a_reject_not_overwritten(tmp_path):
    record = {"dialog": CONVERSATION, "messages": "a field of the record's own"}
    path = write_jsonl(tmp_path / "c.jsonl", [record])
    kept, rejects = read(path, IngestSpec(chat_field="dialog"))
    assert kept.num_rows == 0
    assert rejects["reason"].to_pylist() == [INVALID_CHAT]
    assert "has a field 'messages' beside the chat field 'dialog'" in rejects["value"][0].as_py()


def test_other_fields_too_deep_for_metadata_are_a_malformed_record(tmp_path):
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    path = write_jsonl(tmp_path / "c.jsonl", [{"messages": CONVERSATION, "deep": deep}])
    kept, rejects = read(path)
    assert kept.num_rows == 0
    assert rejects["reason"].to_pylist() == [MALFORMED_RECORD]


def test_without_chat_field_a_list_is_still_a_non_string_text(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": CONVERSATION}])
    kept, rejects = read(path, IngestSpec())
    assert kept.num_rows == 0
    assert rejects["reason"].to_pylist() == [NON_STRING_TEXT]


def test_parquet_list_of_structs_and_json_string_columns(tmp_path):
    table = pa.table(
        {
            "n": [1, 2, 3],
            "messages": pa.array(
                [CONVERSATION, None, [{"role": "user", "content": "Q"}]],
                pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])),
            ),
        }
    )
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=2)
    kept, rejects = read(tmp_path / "c.parquet")
    assert kept["text"].to_pylist() == ["6"]
    assert metadata(kept) == [{"n": 1, CHAT_MESSAGES: HISTORY}]
    assert located(rejects) == [
        (2, MISSING_TEXT),
        (3, INVALID_CHAT),
    ]
    # the same rows read by row-group ranges (as raw_documents cuts a big file)
    parts = [read(tmp_path / "c.parquet", row_groups=(g, g + 1)) for g in (0, 1)]
    assert pa.concat_tables([k for k, _ in parts]).equals(kept)

    strings = pa.table({"messages": [json.dumps(CONVERSATION), "nope"]})
    pq.write_table(strings, tmp_path / "s.parquet")
    kept, rejects = read(tmp_path / "s.parquet")
    assert kept["text"].to_pylist() == ["6"]
    assert rejects["reason"].to_pylist() == [INVALID_CHAT]


def test_csv_cells_and_txt_paragraphs_holding_json(tmp_path):
    cell = json.dumps(CONVERSATION).replace('"', '""')
    (tmp_path / "c.csv").write_text(f'id,messages\n1,"{cell}"\n2,plain words\n', encoding="utf-8")
    kept, rejects = read(tmp_path / "c.csv")
    assert kept["text"].to_pylist() == ["6"]
    assert metadata(kept) == [{"id": "1", CHAT_MESSAGES: HISTORY}]
    assert rejects["source_line"].to_pylist() == [2]
    assert rejects["reason"].to_pylist() == [INVALID_CHAT]

    (tmp_path / "c.txt").write_text(json.dumps(CONVERSATION) + "\n\nnot a conversation\n")
    kept, rejects = read(tmp_path / "c.txt")
    assert kept["text"].to_pylist() == ["6"]
    assert metadata(kept) == [{CHAT_MESSAGES: HISTORY}]
    assert located(rejects) == [(3, INVALID_CHAT)]


def test_byte_ranges_give_the_rows_of_a_whole_file_read(tmp_path):
    records = [{"messages": CONVERSATION, "i": i} for i in range(5)] + [{"messages": []}]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    whole_kept, whole_rejects = read(path)
    data = path.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    first_lines = data[:cut].count(b"\n")
    a = read(path, byte_range=(0, cut))
    b = read(path, byte_range=(cut, len(data)), first_line=first_lines + 1)
    assert pa.concat_tables([a[0], b[0]]).equals(whole_kept)
    assert pa.concat_tables([a[1], b[1]]).equals(whole_rejects)


def test_chat_turns_directly():
    assert chat_turns(json.dumps(CONVERSATION)) == ("6", HISTORY)
    assert chat_turns([{"role": "assistant", "content": "only"}]) == ("only", [])
    with pytest.raises(ChatError, match="message 2"):
        chat_turns([{"role": "user", "content": "Q"}, 5])


def test_chat_field_must_name_a_field_and_unset_stays_out_of_the_fingerprint():
    with pytest.raises(ValueError, match="chat_field"):
        IngestSpec(chat_field="")
    assert "chat_field" not in spec_fields(IngestSpec())
    assert spec_fields(CHAT)["chat_field"] == "messages"


EVERY = IngestSpec(chat_field="messages", chat_answers="every")


def test_every_answer_is_a_row_with_the_conversation_before_it():
    assert chat_answers(CONVERSATION) == [
        (3, "4", HISTORY[:2]),
        (5, "6", HISTORY),
    ]
    # OpenAI's weight 0 marks an answer not to learn: it stays context of the later ones.
    weighted = [dict(m) for m in CONVERSATION]
    weighted[2]["weight"] = 0
    assert chat_answers(weighted) == [(5, "6", HISTORY)]
    # A conversation cut off before its next answer teaches the answers it has.
    assert chat_answers(HISTORY) == [(3, "4", HISTORY[:2])]
    with pytest.raises(ChatError, match="no message of the 2 is an assistant's answer"):
        chat_answers(HISTORY[:2])
    with pytest.raises(ChatError, match="message 2 is not an object"):
        chat_answers([{"role": "user", "content": "Q"}, 5])
    # An empty answer teaches nothing (a template would make its row learn the next header).
    blank = [*HISTORY[:2], {"role": "assistant", "content": " \n"}]
    with pytest.raises(ChatError, match=r"\(message 3\) is empty or only whitespace"):
        chat_turns(blank)
    assert chat_answers([*blank, *CONVERSATION[3:]]) == [(5, "6", [*blank, *CONVERSATION[3:4]])]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv", ".txt"])
def test_chat_answers_every_gives_each_answer_its_row_and_its_own_id(tmp_path, suffix):
    """Each assistant message is a row at its record's line; the conversation's last message
    keeps the id it has with ``chat_answers: last``, so switching adds rows and keeps those."""
    records = [{"id": 1, "messages": CONVERSATION}, {"id": 2, "messages": HISTORY[:2]}]
    path = tmp_path / f"c{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, records)
    elif suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
    elif suffix == ".csv":
        cells = [(r["id"], json.dumps(r["messages"]).replace('"', '""')) for r in records]
        rows = "".join(f'{record_id},"{cell}"\n' for record_id, cell in cells)
        path.write_text("id,messages\n" + rows, encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r["messages"]) + "\n\n" for r in records))
    kept, rejects = read(path, EVERY)
    last, _ = read(path)
    assert kept["text"].to_pylist() == ["4", "6"]
    assert [m[CHAT_MESSAGES] for m in metadata(kept)] == [HISTORY[:2], HISTORY]
    assert kept["source_line"].to_pylist() == [1, 1]
    assert kept["doc_id"].to_pylist() == [
        make_doc_id(path.name, 1, 3),
        make_doc_id(path.name, 1),
    ]
    assert last["doc_id"].to_pylist() == [make_doc_id(path.name, 1)]
    line = {".txt": 3}.get(suffix, 2)
    assert located(rejects) == [(line, INVALID_CHAT)]
    assert "no message of the 2 is an assistant's answer" in rejects["value"][0].as_py()


ALL = IngestSpec(chat_field="messages", chat_answers="all")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_chat_answers_all_is_one_row_per_conversation_weighing_each_answer(tmp_path, suffix):
    """``chat_answers: all``: one row per conversation, at the id ``last`` gives it, whose text
    is the conversation's last answer to learn and whose earlier assistant messages say whether
    they are learned too (``weight`` 1) or context (0: OpenAI's weight 0, or empty). Messages
    after the last answer teach nothing and are left out; a conversation without an answer is
    an ``invalid_chat`` reject, as with ``every``."""
    weighted = [dict(m) for m in CONVERSATION]
    weighted[2]["weight"] = 0
    blank = [*HISTORY[:2], {"role": "assistant", "content": " "}, *CONVERSATION[3:]]
    records = [
        {"id": 1, "messages": CONVERSATION},
        {"id": 2, "messages": weighted},
        {"id": 3, "messages": blank},
        {"id": 4, "messages": HISTORY},  # cut off after a question: its answer "4" is learned
        {"id": 5, "messages": HISTORY[:2]},
    ]
    path = tmp_path / f"c{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, records)
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    kept, rejects = read(path, ALL)
    assert kept["text"].to_pylist() == ["6", "6", "6", "4"]
    assert kept["doc_id"].to_pylist() == [make_doc_id(path.name, line) for line in (1, 2, 3, 4)]
    learned, context = {**HISTORY[2], "weight": 1}, {**HISTORY[2], "weight": 0}
    assert [m[CHAT_MESSAGES] for m in metadata(kept)] == [
        [*HISTORY[:2], learned, HISTORY[3]],
        [*HISTORY[:2], context, HISTORY[3]],
        [*HISTORY[:2], {**blank[2], "weight": 0}, HISTORY[3]],
        HISTORY[:2],
    ]
    assert [m["id"] for m in metadata(kept)] == [1, 2, 3, 4]
    assert located(rejects) == [(5, INVALID_CHAT)]


def test_chat_answers_needs_a_chat_field_and_a_known_value():
    with pytest.raises(ValueError, match="set chat_field"):
        IngestSpec(chat_answers="every")
    with pytest.raises(ValueError, match="chat_answers must be 'last', 'every' or 'all'"):
        IngestSpec(chat_field="messages", chat_answers="each")
    assert "chat_answers" not in spec_fields(CHAT)  # unset: old fingerprints stay


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL_CHAT = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 20}'},
    {"role": "assistant", "content": "It is 20 °C in Paris."},
]
READ_CALL = {
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
    "id": "call_1",
}
CALL_TEXT = '{"name":"get_weather","arguments":{"city":"Paris"}}'


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_conversations_that_call_tools_keep_their_calls_and_results(tmp_path, suffix):
    """OpenAI's fine-tuning format with tools: an assistant's ``tool_calls`` (arguments a JSON
    string, read as the object transformers documents; a null content kept) and the ``tool``
    message answering it (its ``tool_call_id`` kept) stay in the conversation; the record's
    ``tools`` go to the metadata, where the template finds them. An answer that calls a tool is
    a row's text as its calls in JSON lines, the call itself in ``tool_call_answer``. Parquet's
    structs (every field of every message, nulls where absent) read the same."""
    records = [
        {"id": 1, "messages": TOOL_CHAT, "tools": TOOLS},
        {"id": 2, "messages": TOOL_CHAT[:2], "tools": TOOLS},
    ]
    path = tmp_path / f"c{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, records)
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    before_call = [{"role": "user", "content": "Weather in Paris?"}]
    called = {"role": "assistant", "content": None, "tool_calls": [READ_CALL]}
    result = {"role": "tool", "content": '{"temp": 20}', "tool_call_id": "call_1"}
    answer = {"content": None, "tool_calls": [READ_CALL]}
    kept, rejects = read(path)
    assert metadata(kept)[0]["tools"] == TOOLS
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == ["It is 20 °C in Paris.", CALL_TEXT]
    first, second = metadata(kept)
    assert first[CHAT_MESSAGES] == [*before_call, called, result]
    assert "tool_call_answer" not in first
    assert second[CHAT_MESSAGES] == before_call and second["tool_call_answer"] == answer

    every, _ = read(path, EVERY)
    assert every["text"].to_pylist() == [CALL_TEXT, "It is 20 °C in Paris.", CALL_TEXT]
    assert metadata(every)[0]["tool_call_answer"] == answer

    whole, _ = read(path, ALL)
    assert whole["text"].to_pylist() == ["It is 20 °C in Paris.", CALL_TEXT]
    assert metadata(whole)[0][CHAT_MESSAGES] == [*before_call, {**called, "weight": 1}, result]


def test_tools_as_json_text_and_parquet_structs_read_as_they_were_written(tmp_path):
    """A CSV cell (or a string column) holds the tools as JSON text: read as the list (an empty
    cell: none; text that is not a list of tools: ``invalid_chat``). Parquet gives every struct
    every field of its column: a tool's definition and a call's object arguments lose the
    fields that are null there, which are another tool's or call's."""
    other_tool = {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time in a time zone.",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    }
    tools = [*TOOLS, other_tool]
    cells = [json.dumps(tools), "", '{"name": "x"}']
    chat = json.dumps(TOOL_CHAT).replace('"', '""')
    rows = "".join(f'"{chat}","{cell.replace(chr(34), chr(34) * 2)}"\n' for cell in cells)
    path = tmp_path / "c.csv"
    path.write_text("messages,tools\n" + rows, encoding="utf-8")
    kept, rejects = read(path)
    assert [m.get("tools") for m in metadata(kept)] == [tools, None]
    assert located(rejects) == [(3, INVALID_CHAT)]  # CSV: the record's number
    assert "the record's tools are dict, not a list of tools" in rejects["value"][0].as_py()

    by_object = {"type": "function", "function": {"name": "get_time", "arguments": {"tz": "UTC"}}}
    messages = [*TOOL_CHAT[:1], {"role": "assistant", "content": None, "tool_calls": [by_object]}]
    objects = [dict(READ_CALL, function={"name": "get_weather", "arguments": {"city": "Paris"}})]
    records = [
        {"messages": messages, "tools": tools},
        {"messages": [*TOOL_CHAT[:1], {**TOOL_CHAT[1], "tool_calls": objects}], "tools": tools},
    ]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "c.parquet")
    kept, rejects = read(tmp_path / "c.parquet")
    assert rejects.num_rows == 0
    answers = [m["tool_call_answer"]["tool_calls"][0]["function"] for m in metadata(kept)]
    assert [a["arguments"] for a in answers] == [{"tz": "UTC"}, {"city": "Paris"}]
    assert all(m["tools"] == tools for m in metadata(kept))
