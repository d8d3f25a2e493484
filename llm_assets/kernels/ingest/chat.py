"""Chat records: a conversation field read into the answers it teaches and the conversation
before each (OpenAI, Hugging Face and ShareGPT messages, tool calls and tool results)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from llm_assets.kernels.ingest.records import _MAX_NAMES, _MISSING, INVALID_CHAT, MALFORMED_RECORD
from llm_assets.kernels.schema import CHAT_MESSAGES, CHAT_ROLE_NAMES, CHAT_TOOL_ANSWER

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec
    from llm_assets.kernels.ingest.records import _Batch


EVERY_ANSWER = "every"
"""``chat_answers`` value: one row per assistant answer of a conversation."""
ALL_ANSWERS = "all"
"""``chat_answers`` value: one row per conversation that learns every answer where it stands
(each earlier learned answer marked ``"weight": 1`` in the row's ``messages``)."""
CHAT_ANSWERS = (EVERY_ANSWER, ALL_ANSWERS)
"""The ``chat_answers`` values besides the default (None: the last message)."""


CHAT_ROLES = {"human": "user", "gpt": "assistant"}
"""ShareGPT's role names and the ones chat templates expect."""
_ASSISTANT = "assistant"
_TOOL_MESSAGE_KEYS = ("tool_call_id", "name")
"""Keys of a ``tool`` message templates read besides its content (Mistral's pair a result with
its call by id; others name the tool)."""


class ChatError(ValueError):
    """A chat field that holds no conversation to learn from (an ``invalid_chat`` reject)."""


def chat_turns(value: Any) -> tuple[str, list[dict[str, Any]]]:
    """The text to learn and the conversation before it, from a chat field's value.

    ``value`` is a list of messages, each ``{"role", "content"}`` (OpenAI, Hugging Face) or
    ``{"from", "value"}`` (ShareGPT, whose ``human`` and ``gpt`` become ``user`` and
    ``assistant``), or a JSON string of such a list. A content given as a list of text parts
    (``[{"type": "text", "text": ...}]``) is their texts joined. An assistant's message may call
    tools (``tool_calls``, :func:`_tool_calls`) and a ``tool`` message carries the result (with
    its ``tool_call_id`` or ``name``). The last message must be the assistant's: its text
    (:func:`answer_text`) is the document's text (the response, the tokens the loss covers); the
    messages before it, as ``{"role", "content"}`` objects (with those keys), are the prompt's
    context. Every earlier assistant turn is context too: one row teaches one answer
    (:func:`chat_answers` for one row per answer).

    Raises :class:`ChatError` saying what is wrong.
    """
    value, messages = _conversation(value)
    return _last_answer(value, messages)


def _last_answer(
    value: list[Any], messages: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    last = messages[-1]
    if isinstance(value[-1], dict) and value[-1].get("weight") == 0:
        raise ChatError(
            f"the last message (message {len(messages)}) has weight 0 (OpenAI's fine-tuning "
            "format: not to be learned): no answer to learn"
        )
    if last["role"] != _ASSISTANT:
        raise ChatError(
            f"the last message (message {len(messages)}) is from {last['role']!r}, not "
            "'assistant': no answer to learn"
        )
    text = answer_text(last)
    if not text.strip():
        raise ChatError(
            f"the last message (message {len(messages)}) is empty or only whitespace: no answer "
            "to learn"
        )
    return text, messages[:-1]


def chat_answers(value: Any) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """Every answer a conversation teaches (``chat_answers: every``): for each assistant message
    not of ``weight: 0`` nor empty (only whitespace, and no tool call), its number (1-based), its
    text (:func:`answer_text`) and the conversation before it, in order. Messages after the last
    answer (a conversation cut off before its next answer) teach nothing. The value is read as
    :func:`chat_turns` reads it.

    Raises :class:`ChatError` saying what is wrong, or that no message is an answer to learn.
    """
    value, messages = _conversation(value)
    return _answers(value, messages)


def _answers(
    value: list[Any], messages: list[dict[str, Any]]
) -> list[tuple[int, str, list[dict[str, Any]]]]:
    answers = [
        (number, answer_text(message), messages[: number - 1])
        for number, message in enumerate(messages, 1)
        if message["role"] == _ASSISTANT
        and answer_text(message).strip()
        and not (isinstance(value[number - 1], dict) and value[number - 1].get("weight") == 0)
    ]
    if not answers:
        raise ChatError(
            f"no message of the {len(messages)} is an assistant's answer to learn (not empty, of "
            "weight other than 0)"
        )
    return answers


def answer_text(message: dict[str, Any]) -> str:
    """An assistant message's text as a row's text: its content, then each tool call it makes
    as a line of JSON (``{"name": ..., "arguments": {...}}``), so that filters, dedup and people
    reading the warehouse see what it does (the template writes the calls its own way)."""
    calls = message.get("tool_calls")
    if not calls:
        return message["content"]
    lines = [message["content"]] if (message["content"] or "").strip() else []
    lines += [
        orjson.dumps(
            {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
        ).decode()
        for call in calls
    ]
    return "\n".join(lines)


def _parsed(value: Any, problem: str) -> Any:
    """``value``, or the JSON a string holds (a CSV cell, a string column); :class:`ChatError`
    saying ``problem`` for a string that is not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise ChatError(f"{problem}: {error}") from None


def _conversation(value: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    """A chat field's list of messages (parsed from a JSON string) and each one read
    (:func:`_chat_message`); :class:`ChatError` if it is not a non-empty list of readable
    messages."""
    value = _parsed(value, "a string that is not a JSON list of messages")
    if not isinstance(value, list):
        raise ChatError(f"not a list of messages but {_kind(value)}")
    if not value:
        raise ChatError("an empty list of messages")
    return value, [_chat_message(number, message) for number, message in enumerate(value, 1)]


def _chat_message(number: int, message: Any) -> dict[str, Any]:
    """One message as templates read it: ``{"role", "content"}`` (a text), with an assistant's
    ``tool_calls`` (:func:`_tool_calls`; its content may then be null: empty) and a tool
    result's ``tool_call_id`` and ``name``; :class:`ChatError` naming the message otherwise."""
    if not isinstance(message, dict):
        what = (
            "list (in Parquet: a map column's key-value pairs)"
            if isinstance(message, list)
            else _kind(message)
        )
        raise ChatError(
            f"message {number} is not an object but {what}: messages are objects (JSON) or "
            "structs (Parquet) with a role and a content"
        )
    role = _message_field(message, "role", "from")
    content = _message_field(message, "content", "value")
    if content is _MISSING and _holds_calls(message.get("tool_calls")):
        content = None  # a call without a content (Hugging Face's examples write none)
    if role is _MISSING or content is _MISSING:
        keys = ", ".join(sorted(map(str, message))[:_MAX_NAMES]) or "none"
        raise ChatError(
            f"message {number} has no 'role' and 'content' (nor ShareGPT's 'from' and "
            f"'value'); its keys: {keys}"
        )
    if not isinstance(role, str):
        raise ChatError(f"message {number}'s role is not a string but {_kind(role)}")
    role = role.lower()  # "User" is the user
    role = CHAT_ROLES.get(role, role)
    if role not in CHAT_ROLE_NAMES:
        raise ChatError(
            f"message {number}'s role {role[:40]!r} is not one of {', '.join(CHAT_ROLE_NAMES)} "
            "(nor ShareGPT's human, gpt)"
        )
    weight = message.get("weight")
    if weight is not None and (
        isinstance(weight, bool) or not isinstance(weight, int | float) or weight not in (0, 1)
    ):
        raise ChatError(
            f"message {number} ({role}) has weight {_json_text(weight)[:40]}: a weight is 0 (not "
            "learned) or 1 (learned), as in OpenAI's fine-tuning format"
        )
    if weight == 1 and role != _ASSISTANT:
        raise ChatError(
            f"message {number} ({role}) has weight 1: only assistant messages are learned"
        )
    if _holds_calls(message.get("function_call")):
        raise ChatError(
            f"message {number} ({role}) has function_call, OpenAI's deprecated form of a call: "
            'write it as tool_calls ([{"type": "function", "function": {"name", '
            "\"arguments\"}}]), and the function's result as a message of role 'tool'"
        )
    calls = _tool_calls(number, role, message.get("tool_calls"))
    if calls and content is None:
        # OpenAI's calls have a null content: kept, as templates tell calls by it (DeepSeek's)
        return {"role": role, "content": None, "tool_calls": calls}
    if (
        isinstance(content, list)
        and content
        and all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            for part in content
        )
    ):
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        what = "text parts only" if isinstance(content, list) and content else "a string"
        raise ChatError(
            f"message {number} ({role}) has a content of {_kind(content)}, not {what}: only "
            "text conversations are read"
        )
    read: dict[str, Any] = {"role": role, "content": content}
    if calls:
        read["tool_calls"] = calls
    if role == "tool":
        read.update(
            (key, message[key])
            for key in _TOOL_MESSAGE_KEYS
            if isinstance(message.get(key), str) and message[key]
        )
    return read


def _json_text(value: Any) -> str:
    """``value`` as JSON writes it (``"0"``, ``true``): a reject shows it as the file has it."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def _tool_calls(number: int, role: str, value: Any) -> list[dict[str, Any]] | None:
    """A message's tool calls as chat templates read them, each ``{"type": "function",
    "function": {"name", "arguments"}}`` (with its ``id`` when given), the arguments an object:
    OpenAI's are a JSON string of one, which a template would write as a string. A call may
    also be ``{"name", "arguments"}`` alone. None when the message calls nothing (null, empty,
    Parquet's struct of nulls); :class:`ChatError` for calls that cannot be read, or calls made
    by a message that is not the assistant's."""
    if not _holds_calls(value):
        return None
    where = f"message {number} ({role})"
    if role != _ASSISTANT:
        raise ChatError(f"{where} has tool_calls: only the assistant's messages call tools")
    value = _parsed(value, f"{where} has tool_calls that are not JSON")
    if not isinstance(value, list):
        raise ChatError(f"{where} has tool_calls of {_kind(value)}, not a list of calls")
    calls = []
    for index, call in enumerate(value, 1):
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else call
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise ChatError(f"{where}'s tool call {index} has no function name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as error:
                raise ChatError(
                    f"{where}'s tool call {index} ({name[:40]}) has arguments that are not "
                    f"JSON: {error}"
                ) from None
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise ChatError(
                f"{where}'s tool call {index} ({name[:40]}) has arguments of "
                f"{_kind(arguments)}, not an object"
            )
        kind = call.get("type") if isinstance(call.get("type"), str) else None
        read: dict[str, Any] = {
            "type": kind or "function",
            "function": {"name": name, "arguments": arguments},
        }
        if isinstance(call.get("id"), str) and call["id"]:
            read["id"] = call["id"]
        calls.append(read)
    return calls


def _holds_calls(value: Any) -> bool:
    """Whether a ``tool_calls`` / ``function_call`` value holds a call: not null, empty, a struct
    of nulls (Parquet gives every row every field) or a JSON string of one of those."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return bool(value.strip())
    if isinstance(value, dict):
        return any(_holds_calls(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_calls(item) for item in value)
    return value is not None and value != ""


def _message_field(message: dict[str, Any], key: str, alias: str) -> Any:
    """``message[key]``, else ``message[alias]`` (ShareGPT's name): the first that is not null,
    so rows of a data set that concatenated both formats (the other pair null) are read. None if
    both are null, :data:`_MISSING` if neither is there."""
    for name in (key, alias):
        value = message.get(name)
        if value is not None:
            return value
    return None if key in message or alias in message else _MISSING


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _chat_documents(
    value: Any, others: dict[str, Any], chat_field: str, answers: str | None
) -> list[tuple[str, bytes, int | None]]:
    """A chat record's rows: (text, metadata, part) per row, the metadata its other fields
    (``others``) plus the conversation before the row's answer under
    :data:`~llm_assets.kernels.schema.CHAT_MESSAGES`. ``answers`` is the ``chat_answers`` mode:
    None, the last message (:func:`chat_turns`); ``every``, a row per answer
    (:func:`chat_answers`); ``all``, one row whose answer is the conversation's last one to
    learn and whose earlier assistant messages carry ``"weight"``: 1 when they are answers to
    learn too (:func:`chat_answers`), else 0 (context, as OpenAI's fine-tuning format marks
    them). ``part`` is None for the conversation's last message and for ``all``'s row (the id a
    record always had), else the answer's message number (its own id). :class:`ChatError` if the
    value holds no conversation or another field already has that name; ``orjson`` errors pass
    through."""
    value, messages = _conversation(value)
    if answers is None:
        text, history = _last_answer(value, messages)
        learned = [(len(messages), text, history)]
    else:
        learned = _answers(value, messages)
    for name in (CHAT_MESSAGES, CHAT_TOOL_ANSWER):
        if chat_field != name and name in others:
            raise ChatError(
                f"the record has a field {name!r} beside the chat field {chat_field!r}: the "
                f"conversation is stored as {name!r}, which would hide it"
            )
    if TOOLS in others:
        others[TOOLS] = _tools(others[TOOLS])
    if answers == ALL_ANSWERS:
        numbers = {number for number, _, _ in learned}
        number, text, history = learned[-1]
        history = [
            {**message, "weight": int(n in numbers)} if message["role"] == _ASSISTANT else message
            for n, message in enumerate(history, 1)
        ]
        return [(text, _chat_metadata(others, history, messages[number - 1]), None)]
    last = len(value) if answers == EVERY_ANSWER else None
    return [
        (text, _chat_metadata(others, history, messages[number - 1]), part)
        for number, text, history in learned
        for part in [None if last is None or number == last else number]
    ]


TOOLS = "tools"
"""The field of a chat record holding the tools (function definitions) its template writes."""


def _tools(value: Any) -> list[Any] | None:
    """A chat record's ``tools``: a list of definitions, read from JSON text too (a CSV cell, a
    string column); null or empty text is none. :class:`ChatError` for anything else."""
    if isinstance(value, str) and not value.strip():
        return None
    value = _parsed(value, "the record's tools are text that is not JSON")
    if value is not None and not isinstance(value, list):
        raise ChatError(f"the record's tools are {_kind(value)}, not a list of tools")
    return value


def _chat_metadata(
    others: dict[str, Any], history: list[dict[str, Any]], answer: dict[str, Any]
) -> bytes:
    """A chat row's metadata: the record's other fields, the conversation before the answer
    and, when the answer calls tools, the answer as the template renders it."""
    fields = {**others, CHAT_MESSAGES: history}
    if calls := answer.get("tool_calls"):
        fields[CHAT_TOOL_ANSWER] = {"content": answer["content"], "tool_calls": calls}
    return orjson.dumps(fields)


def _keep_chat(
    batch: _Batch,
    line: int,
    value: Any,
    others: dict[str, Any],
    spec: IngestSpec,
    sample: Callable[[], str],
) -> None:
    """Keep a chat record's rows, or reject it (``invalid_chat``; ``malformed_record`` for other
    fields that cannot be stored as metadata)."""
    try:
        rows = _chat_documents(value, others, spec.chat_field or "", spec.chat_answers)
    except ChatError as error:
        batch.reject(line, INVALID_CHAT, str(error), sample())
    except orjson.JSONEncodeError as error:
        value = f"its other fields cannot be stored as metadata: {error}"
        batch.reject(line, MALFORMED_RECORD, value, sample())
    else:
        for text, metadata, part in rows:
            batch.keep(line, text, metadata, part)
