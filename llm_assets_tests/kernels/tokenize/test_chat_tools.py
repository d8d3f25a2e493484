"""Conversations that call tools: ingest keeps each assistant's ``tool_calls`` and each tool's
result, the record's ``tools`` reach the template, and the learned tokens of an answer that calls
a tool are the call as the model's template writes it. Templates disagree on how they read calls
(arguments as an object or as JSON text, a call's content null or empty): each row is given them
the first way its template renders. A template without tool support would drop the tools or the
calls from the prompt, or learn an empty turn: such rows are rejects that say so.

The reference template is Qwen2.5-Instruct's own (``templates/qwen2.5-instruct.jinja``, from its
``tokenizer_config.json``), checked against transformers' ``apply_chat_template``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.kernels.tokenize.table import tokenize_table
from llm_assets_tests.conftest import gpt2_folder

QWEN25 = (Path(__file__).parent / "templates" / "qwen2.5-instruct.jinja").read_text()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _call(city: str, call_id: str) -> dict:
    """A call as OpenAI's fine-tuning format writes it: arguments as a JSON string."""
    arguments = json.dumps({"city": city})
    function = {"name": "get_weather", "arguments": arguments}
    return {"id": call_id, "type": "function", "function": function}


CHAT = [
    {"role": "system", "content": "You help."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [_call("Paris", "call12345")]},
    {"role": "tool", "tool_call_id": "call12345", "content": '{"temp": 20}'},
    {"role": "assistant", "content": "It is 20 C in Paris."},
    {"role": "user", "content": "And Rome?"},
    {"role": "assistant", "content": None, "tool_calls": [_call("Rome", "call67890")]},
]


def _rows(tmp_path: Path, answers: str | None, chat: list = CHAT, tools: list = TOOLS) -> pa.Table:
    """The rows ingest makes of one conversation (JSON Lines, OpenAI's format)."""
    path = tmp_path / "tools.jsonl"
    path.write_text(json.dumps({"messages": chat, "tools": tools}) + "\n", encoding="utf-8")
    spec = IngestSpec(chat_field="messages", chat_answers=answers)
    results = list(read_documents(str(path), path.name, spec))
    assert sum(r.rejects.num_rows for r in results) == 0
    return pa.concat_tables([r.kept for r in results])


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("qwen-like")
    gpt2_folder(folder, ["<|im_start|>", "<|im_end|>"], special=True)
    gpt2_folder(folder, ["<tool_call>", "</tool_call>"], special=False)
    return folder


def _learned(spec: TokenizerSpec, row: dict) -> list[str]:
    tok = spec.build()
    return [tok.decode(row["input_ids"][s["start"] : s["end"]]) for s in row["learned_spans"]]


def test_calls_and_tools_render_as_transformers_renders_them(qwen_folder, tmp_path):
    """``chat_answers: all`` over a conversation of two calls: the prompt is transformers'
    rendering of the messages (arguments as objects, the tools in the system prompt), and each
    call is learned as Qwen writes it, in ``<tool_call>`` tags, with its turn's end."""
    spec = TokenizerSpec(name=str(qwen_folder), chat_template=QWEN25)
    result = tokenize_table(_rows(tmp_path, "all"), spec)
    assert result.rejects.num_rows == 0
    (row,) = result.kept.to_pylist()
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(qwen_folder), local_files_only=True)
    messages = json.loads(json.dumps(CHAT[:-1]))
    for message in messages:
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    expected = reference.apply_chat_template(
        messages, tools=TOOLS, chat_template=QWEN25, add_generation_prompt=True, tokenize=False
    )
    assert row["prompt"] == expected
    assert '"name": "get_weather"' in row["prompt"].split("<|im_end|>")[0]  # the tools
    call = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{}"}}}}\n</tool_call>'
    assert _learned(spec, row) == [
        call.format("Paris") + "<|im_end|>",
        "It is 20 C in Paris.<|im_end|>",
        call.format("Rome") + "<|im_end|>",
    ]
    assert row["text"] == '{"name":"get_weather","arguments":{"city":"Rome"}}'


READS_TEXT = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is none %}{% for c in m['tool_calls'] %}"
    "<call>{{ c['function']['name'] + ' ' + c['function']['arguments'] }}</call>"
    "{% endfor %}{% else %}{{ m['content'] }}{% endif %}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""DeepSeek's way: a call's content is null, its arguments are written as text (concatenated:
an object fails)."""
READS_EMPTY = (
    "{% for m in messages %}<|{{ m['role'] }}|>{% if '<think>' in m['content'] %}{% endif %}"
    "{{ m['content'] }}"
    "{% for c in m['tool_calls'] or [] %}<call>{{ c['function'] | tojson }}</call>{% endfor %}"
    "<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""A template that reads every content as text (``in`` fails on null), as Qwen3's does."""


@pytest.mark.parametrize(
    ("template", "call"),
    [
        (READS_TEXT, '<call>get_weather {"city": "Rome"}</call><|end|>'),
        (
            READS_EMPTY,
            '<call>{"name": "get_weather", "arguments": {"city": "Rome"}}</call><|end|>',
        ),
    ],
)
def test_each_template_gets_the_calls_the_way_it_reads_them(tmp_path, template, call):
    spec = TokenizerSpec(chat_template=template)
    result = tokenize_table(_rows(tmp_path, None, tools=[]), spec)
    assert result.rejects.num_rows == 0
    (row,) = result.kept.to_pylist()
    assert _learned(spec, row) == [call]
    assert "get_weather" in row["prompt"] and "Paris" in row["prompt"]


def test_a_template_without_tool_support_makes_its_rows_rejects(qwen_folder, tmp_path):
    """ChatML writes neither the tools nor the calls: an answer that calls one would be learned
    as an empty turn, with or without tools (no tool support); a row with tools but no call
    would miss them from its prompt (the template takes none). Qwen's template keeps them."""
    chatml = TokenizerSpec(chat_template="chatml")
    plain = [*CHAT[:2], {"role": "assistant", "content": "Sunny, I think."}]
    result = tokenize_table(_rows(tmp_path, None, plain), chatml)
    assert result.rejects["value"].to_pylist() == [
        "the template does not write the record's tools: it takes none (write their definitions "
        "into the system message, or leave the field out)"
    ]
    for tools in (TOOLS, []):
        result = tokenize_table(_rows(tmp_path, "every", tools=tools), chatml)
        assert result.rejects["value"].to_pylist() == [
            "the template does not write the answer's tool calls: it has no tool support (give a "
            "tool-calling model's own template, chat_template: tokenizer)",
            "the template does not write the tool calls of message 3: it has no tool support (give "
            "a tool-calling model's own template, chat_template: tokenizer)",
            "the template does not write the tool calls of message 3: it has no tool support (give "
            "a tool-calling model's own template, chat_template: tokenizer)",
        ]
    qwen = TokenizerSpec(name=str(qwen_folder), chat_template=QWEN25)
    assert tokenize_table(_rows(tmp_path, "every"), qwen).kept.num_rows == 3


def test_a_control_token_in_a_call_or_a_tool_is_a_reject(qwen_folder, tmp_path):
    """A call's arguments, a tool's description or a result's id holding ``<|im_end|>`` would
    end the turn where the template writes them: ``special_token_in_chat``, naming where."""
    spec = TokenizerSpec(name=str(qwen_folder), chat_template=QWEN25)
    forged = json.loads(json.dumps(CHAT))
    forged[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"city": "<|im_end|>"})
    tools = json.loads(json.dumps(TOOLS))
    tools[0]["function"]["description"] = "Ends here<|im_end|>"
    named = json.loads(json.dumps(CHAT))
    named[3]["tool_call_id"] = "<|im_start|>"
    for chat, tool_list, where in [
        (forged, TOOLS, "message 3 (assistant)'s tool calls hold '<|im_end|>'"),
        (CHAT, tools, "the tools hold '<|im_end|>'"),
        (named, TOOLS, "message 4 (tool)'s tool_call_id hold '<|im_start|>'"),
    ]:
        result = tokenize_table(_rows(tmp_path, None, chat, tool_list), spec)
        assert result.rejects["reason"].to_pylist() == ["special_token_in_chat"]
        assert result.rejects["value"][0].as_py().startswith(where)


TOOL_LAST = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}<tool>{{ m['content'] }}"
    "{% if loop.last %} (awaiting){% endif %}</tool>\n"
    "{% elif m.get('tool_calls') %}<|assistant|>"
    "{% if m['tool_calls'] | length > 1 %}{{ raise_exception('one call at a time') }}{% endif %}"
    "{% for c in m['tool_calls'] %}<call>{{ c['function'] | tojson }}</call>{% endfor %}<|end|>\n"
    "{% else %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""Writes a tool result that ends the conversation otherwise (as Hermes-2-Pro's does), and
refuses parallel calls (as Llama 3.1's does)."""


def test_a_call_the_template_cannot_learn_after_its_prompt_is_a_reject_saying_why(tmp_path):
    """An answer that calls a tool is learned only as the template writes it after the prompt:
    when the conversation ending with the call does not start with that prompt, or the template
    refuses the call, the row is a reject giving that reason (a text answer there is learned
    alone); a call the template writes after its prompt is learned."""
    spec = TokenizerSpec(chat_template=TOOL_LAST)
    chat = json.loads(json.dumps(CHAT))
    two = [_call("Rome", "call1"), _call("Oslo", "call2")]
    parallel = [*chat[:-1], {"role": "assistant", "content": None, "tool_calls": two}]
    chained = [
        *chat[:4],
        {"role": "assistant", "content": None, "tool_calls": [_call("Rome", "call2")]},
        {"role": "tool", "tool_call_id": "call2", "content": '{"temp": 25}'},
        {"role": "assistant", "content": "20 C in Paris, 25 C in Rome."},
    ]
    result = tokenize_table(_rows(tmp_path, "every", chained, tools=[]), spec)
    assert result.kept["text"].to_pylist() == [
        '{"name":"get_weather","arguments":{"city":"Paris"}}',
        "20 C in Paris, 25 C in Rome.",
    ]
    assert result.rejects["value"].to_pylist() == [
        "the template writes the conversation ending with the answer's tool calls otherwise "
        "than its prompt followed by them: the calls cannot be learned as the model writes them "
        "after that prompt"
    ]
    result = tokenize_table(_rows(tmp_path, None, parallel, tools=[]), spec)
    assert result.rejects["value"].to_pylist() == ["one call at a time"]
