"""Chat rows rendered by their template: each row's prompt, what the template writes for its
answer, the earlier answers it learns, or why it is refused (:func:`render_chat`)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from llm_assets.kernels.schema import CHAT_MESSAGES, CHAT_ROLE_NAMES, CHAT_TOOL_ANSWER, SAMPLE_CHARS
from llm_assets.kernels.tokenize.chat_template import compiled_chat_template
from llm_assets.kernels.tokenize.prompts import MISSING_PROMPT_FIELD

if TYPE_CHECKING:
    import jinja2

    from llm_assets.kernels.tokenize.tokenizer import Tokenizer


CHAT_TEMPLATE_ERROR = "chat_template_error"
"""SFT with ``chat_template``: the template failed on the row's conversation (its
``raise_exception``, e.g. roles that do not alternate, or any other error while rendering);
value = the error's message."""
SPECIAL_TOKEN_IN_CHAT = "special_token_in_chat"
"""SFT with ``chat_template``: a message of the conversation holds one of the tokenizer's special
tokens. The chat prompt is encoded with special tokens recognized (the template's markup must be),
so the message would inject a control token; value = which message and token."""


@lru_cache(maxsize=8)
def _special_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex finding any of the tokens (Llama 3 has 256 special tokens), longest first."""
    if not tokens:
        return None
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))))


@dataclass(slots=True)
class _ChatRow:
    """What a chat row's metadata gives its template (:func:`_chat_history`)."""

    history: list[dict[str, Any]]
    """The conversation before the answer, each message with the keys templates read."""
    learned: list[int]
    """Indices of the earlier answers to learn (``"weight": 1``)."""
    tools: list[Any] | None
    """The record's ``tools`` (function definitions the template writes), if any."""
    calls: list[dict[str, Any]] | None
    """The answer's tool calls (:data:`CHAT_TOOL_ANSWER`), if it makes any."""
    content: str | None
    """The content of an answer that calls tools (its row's text is the calls as JSON)."""
    tooled: bool = False
    """Whether anything of tools is there: tools, calls or a tool result's keys (the checks and
    ways of :func:`_renderable_calls` apply)."""
    calling: bool = False
    """Whether the answer or an earlier message calls tools."""


def _chat_history(raw: str | None) -> _ChatRow | str:
    """A row's conversation from its metadata, the indices of its earlier answers to learn
    (assistant messages of ``"weight": 1``, as ``chat_answers: all`` writes them; a message
    without a weight is context), its tools and its answer's tool calls, or what is wrong with
    it (a reject's value)."""
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return f"{CHAT_MESSAGES} (metadata is not JSON)"
    if not isinstance(record, Mapping) or record.get(CHAT_MESSAGES) is None:
        # Rows read without raw_documents' chat_field have no conversation unless their own
        # record had a messages field: say where it comes from.
        return f"{CHAT_MESSAGES} (no conversation in the metadata: see raw_documents' chat_field)"
    messages = record[CHAT_MESSAGES]
    if not isinstance(messages, list):
        return f"{CHAT_MESSAGES} (not a list)"
    history = []
    learned = []
    tooled = calling = False
    for number, message in enumerate(messages, 1):
        if not isinstance(message, Mapping):
            return f"{CHAT_MESSAGES} (message {number} is not a role and a content string)"
        role, content = message.get("role"), message.get("content")
        calls = message.get("tool_calls")
        if not isinstance(role, str) or not (
            isinstance(content, str) or (content is None and calls)
        ):
            return f"{CHAT_MESSAGES} (message {number} is not a role and a content string)"
        if role not in CHAT_ROLE_NAMES:
            return f"{CHAT_MESSAGES} (message {number}'s role {role[:40]!r} is not a chat role)"
        entry = {"role": role, "content": content}
        if len(message) > 2:  # weight, tool keys
            weight = message.get("weight")
            if weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
                return f"{CHAT_MESSAGES} (message {number}'s weight {weight!r} is not 0 or 1)"
            if weight == 1:
                if role != "assistant":
                    return (
                        f"{CHAT_MESSAGES} (message {number} ({role}) has weight 1: only "
                        "assistant messages are learned)"
                    )
                learned.append(number - 1)
            if calls is not None and not _are_calls(calls):
                return f"{CHAT_MESSAGES} (message {number}'s tool_calls are not a list of calls)"
            # The keys templates read, not the weight (templates do not know it).
            entry.update((key, message[key]) for key in _TOOL_KEYS if message.get(key))
        history.append(entry)
        tooled = tooled or len(entry) > 2
        calling = calling or calls is not None
    tools = record.get("tools")
    if isinstance(tools, str):  # JSON text (rows read without chat_field)
        try:
            tools = json.loads(tools) if tools.strip() else None
        except ValueError:
            return "tools (text that is not JSON)"
    if tools is not None and not isinstance(tools, list):
        return "tools (not a list of tools)"
    answer = record.get(CHAT_TOOL_ANSWER)
    if answer is not None and not (
        isinstance(answer, Mapping)
        and isinstance(answer.get("content"), str | None)
        and _are_calls(answer.get("tool_calls"))
    ):
        return f"{CHAT_TOOL_ANSWER} (not a content and a list of calls)"
    return _ChatRow(
        history,
        learned,
        tools,
        None if answer is None else answer["tool_calls"],
        None if answer is None else answer["content"],
        tooled=tooled or bool(tools) or answer is not None,
        calling=calling or answer is not None,
    )


_TOOL_KEYS = ("tool_calls", "tool_call_id", "name")
"""The keys of a message a template is given besides its role and content (transformers' chat
format)."""


def _are_calls(value: Any) -> bool:
    """Whether ``value`` is a list of tool calls as templates read them."""
    return isinstance(value, list) and all(
        isinstance(call, Mapping)
        and isinstance(call.get("function"), Mapping)
        and isinstance(call["function"].get("name"), str)
        for call in value
    )


@dataclass(frozen=True)
class ChatRendering:
    """What :func:`render_chat` makes of each row: its prompt, what the template writes for its
    answer, or why the row is refused."""

    prompts: list[str | None]
    """The conversation before the answer with ``add_generation_prompt``; None: refused."""
    completions: list[str | None]
    """What the template writes after the prompt when the conversation ends with the answer: the
    answer and the template's own end of a turn (``<|im_end|>``), trailing whitespace removed.
    None: the row is refused, or the answer alone is learned (the template renders the answer
    in a way that does not continue the prompt, or fails, or the answer holds a special token
    the template writes: :func:`_completion`)."""
    rejects: list[tuple[str, str] | None]
    """(reason, value) of each refused row: :data:`MISSING_PROMPT_FIELD`,
    :data:`SPECIAL_TOKEN_IN_CHAT` or :data:`CHAT_TEMPLATE_ERROR`."""
    regions: list[list[tuple[int, int]]]
    """Per row, the ``[start, end)`` character ranges of its prompt that are earlier answers to
    learn (``chat_answers: all``: :func:`_answer_regions`), in order; empty for other rows."""


def render_chat(
    metadata: list[str | None], answers: list[str], template: str, tok: Tokenizer
) -> ChatRendering:
    """Each row's chat prompt and completion. The prompt is its conversation (metadata key
    ``messages``, a list of ``{"role", "content"}``) rendered by ``template`` (its source:
    :func:`chat_template_text`) with ``add_generation_prompt``, and ``tok``'s ``bos_token``,
    ``eos_token``... as transformers' ``apply_chat_template`` renders it; an empty conversation
    renders too (the generation prompt). The completion is what the same template writes after
    that prompt for the conversation followed by the row's answer (its text, from ``answers``)
    as the assistant's message, as TRL's ``SFTTrainer`` takes it: the answer with the template's
    end of a turn, so a model learns to close its turn as the template does. The earlier answers
    a row learns too (``"weight": 1`` in its conversation) are found in its prompt
    (:attr:`ChatRendering.regions`). A row that cannot be rendered is refused
    (:attr:`ChatRendering.rejects`)."""
    compiled = compiled_chat_template(template)
    variables = dict(tok.template_vars)
    special = _special_pattern(tok.special_tokens)
    text_special = _special_pattern(tok.text_special_tokens)
    prompts: list[str | None] = []
    completions: list[str | None] = []
    rejects: list[tuple[str, str] | None] = []
    all_regions: list[list[tuple[int, int]]] = []
    for raw, answer in zip(metadata, answers, strict=True):
        read = _chat_history(raw)
        prompt: str | None = None
        completion: str | None = None
        reject: tuple[str, str] | None = None
        regions: list[tuple[int, int]] = []
        if isinstance(read, str):
            reject = (MISSING_PROMPT_FIELD, read)
        elif (
            read.tooled
            and special is not None
            and (structured := _control_token_in_calls(read, special))
        ):
            reject = (SPECIAL_TOKEN_IN_CHAT, structured[:SAMPLE_CHARS])
        else:
            calling = read.calling
            if calling:
                read = _renderable_calls(compiled, {**variables, "documents": None}, read)
            history, learned = read.history, read.learned
            if read.calls is not None:
                answer = read.content  # the row's text is its calls as JSON: the template's
            held = _control_tokens_in(history, special) if special is not None else None
            marks_held = any(mark in (m["content"] or "") for m in history for mark in _MARKS)
            if held is not None and marks_held:
                # The message holds our markers itself: its control tokens cannot be told from
                # the template's own; refuse it as if the template wrote them.
                reject = _held_reject(history, held)
            else:
                # What apply_chat_template passes: the tokenizer's special_tokens_map, then its
                # own arguments (the record's tools; no documents here).
                context = {**variables, "tools": read.tools, "documents": None}
                try:
                    prompt = compiled.render(context, messages=history, add_generation_prompt=True)
                    if held is not None:
                        # Rendered again with the tokens marked: is any written into the prompt?
                        # (The template may drop them: Qwen3 drops earlier turns' reasoning.)
                        shown = compiled.render(
                            context, messages=_marked(history, special), add_generation_prompt=True
                        )
                        if written := _MARKED.search(shown):
                            prompt, reject = None, _held_reject(history, written.group(1))
                except Exception as err:  # the template is code from elsewhere: the row's error
                    prompt, reject = None, (CHAT_TEMPLATE_ERROR, _error_message(err))
                if prompt is not None and not marks_held:
                    completion = _completion(
                        compiled, context, history, prompt, answer, text_special, read.calls
                    )
                if prompt is not None and (read.tools or calling):
                    ignored = _unwritten_tools(compiled, context, read, prompt, completion)
                    if ignored is not None:
                        prompt, reject = None, (CHAT_TEMPLATE_ERROR, ignored[:SAMPLE_CHARS])
                if prompt is not None and learned:
                    found = _answer_regions(
                        compiled, context, history, prompt, learned, text_special
                    )
                    if isinstance(found, str):
                        prompt, reject = None, (CHAT_TEMPLATE_ERROR, found[:SAMPLE_CHARS])
                    else:
                        regions = found
        prompts.append(prompt)
        completions.append(completion)
        rejects.append(reject)
        all_regions.append(regions)
    return ChatRendering(prompts, completions, rejects, all_regions)


def _renderable_calls(compiled: jinja2.Template, context: dict, row: _ChatRow) -> _ChatRow:
    """``row`` with its tool calls as its template reads them. Templates disagree: most read a
    call's arguments as an object (transformers' documented form) and its content as text
    (Qwen3's fails on a null one; a template that prints it would write "None"), DeepSeek's tells
    a call by its null content and writes the arguments as text. The first of these ways in which
    the template renders the conversation and writes every call (its function's name appears
    once more per call than without the calls) is the row's: empty content, then null; arguments
    as objects, then as JSON text. A template that writes no call gets the first way it renders
    (:func:`_unwritten_tools` refuses the row), one that renders none the last (its error is the
    row's reject)."""

    def variant(message: dict[str, Any], empty: bool, text: bool) -> dict[str, Any]:
        calls = message.get("tool_calls")
        if not calls:
            return message
        if text:
            calls = [
                {**c, "function": {**c["function"], "arguments": _arguments_text(c)}} for c in calls
            ]
        content = "" if empty and message["content"] is None else message["content"]
        return {**message, "content": content, "tool_calls": calls}

    answer: dict[str, Any] = {"role": "assistant", "content": ""}  # a text answer's stand-in
    if row.calls is not None:
        answer = {"role": "assistant", "content": row.content, "tool_calls": row.calls}
    conversation = [*row.history, answer]
    context = {**context, "tools": row.tools}
    names = [c["function"]["name"] for m in conversation for c in m.get("tool_calls") or ()]
    bare = [
        {"role": m["role"], "content": m["content"] or ""} if m.get("tool_calls") else m
        for m in conversation
    ]
    try:
        without = compiled.render(context, messages=bare, add_generation_prompt=False)
    except Exception:
        without = ""
    first = None
    ways = [[variant(m, empty, text) for m in conversation] for empty, text in _CALL_WAYS]
    for candidate in ways:
        try:
            shown = compiled.render(context, messages=candidate, add_generation_prompt=False)
        except Exception:  # the template reads calls otherwise: try the next way
            continue
        first = first or candidate
        if all(shown.count(n) >= without.count(n) + names.count(n) for n in set(names)):
            first = candidate
            break
    # None renders: the first way, whose error is the template's own ("roles must alternate")
    *history, reply = first or ways[0]
    if row.calls is None:
        return dataclasses.replace(row, history=history)
    calls, content = reply["tool_calls"], reply["content"]
    return dataclasses.replace(row, history=history, calls=calls, content=content)


_CALL_WAYS = ((True, False), (True, True), (False, False), (False, True))
"""The ways :func:`_renderable_calls` tries, in order: (a null content as empty text, the
arguments as JSON text)."""


def _arguments_text(call: dict[str, Any]) -> str:
    arguments = call["function"].get("arguments")
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _unwritten_tools(
    compiled: jinja2.Template,
    context: dict,
    row: _ChatRow,
    prompt: str,
    completion: str | None,
) -> str | None:
    """Why a row's tools or tool calls cannot be learned with this template, None if they can:
    a template without tool support renders the same prompt without the tools, or without the
    calls (its earlier answers that call tools would be learned as empty turns), or the same
    completion without the answer's calls; a template that does not continue its generation
    prompt with the answer's calls gives none to learn (such an answer is not learned alone:
    its calls as JSON are not the model's format)."""
    advice = (
        ": it has no tool support (give a tool-calling model's own template, "
        "chat_template: tokenizer)"
    )
    tools_advice = (
        ": it takes none (write their definitions into the system message, or leave the field out)"
    )
    history = row.history
    bare = [
        {"role": m["role"], "content": m["content"] or ""} if m.get("tool_calls") else m
        for m in history
    ]
    try:
        if bare != history and prompt == compiled.render(
            context, messages=bare, add_generation_prompt=True
        ):
            number = next(n for n, m in enumerate(history, 1) if m.get("tool_calls"))
            return f"the template does not write the tool calls of message {number}" + advice
        if row.tools and prompt == compiled.render(
            {**context, "tools": None}, messages=history, add_generation_prompt=True
        ):
            if row.calls is not None and _completion(
                compiled, context, history, prompt, row.content or "", None
            ) == _completion(compiled, context, history, prompt, row.content, None, row.calls):
                return "the template does not write the answer's tool calls" + advice
            return "the template does not write the record's tools" + tools_advice
    except Exception:  # the template reads what it was given: it writes them
        pass
    if row.calls is None:
        return None
    if completion is None:
        answer = {"role": "assistant", "content": row.content, "tool_calls": row.calls}
        try:
            compiled.render(context, messages=[*history, answer], add_generation_prompt=False)
        except Exception as err:  # the template's own reason
            return _error_message(err)
        return (
            "the template writes the conversation ending with the answer's tool calls otherwise "
            "than its prompt followed by them: the calls cannot be learned as the model writes "
            "them after that prompt"
        )
    plain = _completion(compiled, context, history, prompt, row.content or "", None)
    if plain == completion:
        return "the template does not write the answer's tool calls" + advice
    return None


def _completion(
    compiled: jinja2.Template,
    context: dict,
    messages: list[dict[str, str]],
    prompt: str,
    answer: str | None,
    text_special: re.Pattern[str] | None,
    calls: list[dict[str, Any]] | None = None,
) -> str | None:
    """What ``compiled`` writes after ``prompt`` (rendered from ``messages``) once the answer is the
    last message (its content, and its tool ``calls`` if it makes any); trailing whitespace (the
    line break after ChatML's ``<|im_end|>``) goes, as it is the next turn's separator, not
    something a model writes, and so does a generation prompt the template writes after every
    conversation, ignoring ``add_generation_prompt``. Whitespace a template writes after every
    conversation (laid out on indented lines) ends the prompt, so the answer follows it without the
    header's own. None (the answer is learned alone) when that rendering fails or does not start
    with the prompt (a template that writes the assistant's header differently for a generation
    prompt), or when it holds a special token of the answer (``text_special``): the markup encoding
    would make it the token's id, and encoding the answer apart from the template's text would
    change its ids (SentencePiece starts every text it encodes with a space)."""
    text = answer or ""  # a call's content may be null (given to the template as it is)
    if any(mark in text for mark in _MARKS):
        return None
    content = answer
    if text_special is not None and text_special.search(text):
        content = text = text_special.sub(_MARK_SUB, text)
    reply: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        reply["tool_calls"] = calls
    conversation = [*messages, reply]
    try:
        full = compiled.render(context, messages=conversation, add_generation_prompt=False)
    except Exception:  # the prompt rendered: learn the answer alone
        return None
    if full.startswith(prompt):
        completion = full[len(prompt) :].rstrip()
    elif prompt != prompt.rstrip() and full.startswith(prompt.rstrip()):
        # The template writes whitespace after every conversation (a template laid out on
        # indented lines): the prompt ends with more of it than the header before the answer.
        completion = full[len(prompt.rstrip()) :].strip()
    else:
        return None
    if any(mark in completion for mark in _MARKS):
        return None  # the answer's special token is in it (whole, or cut by the template)
    for shown in (text, text.strip()):  # a template may trim the answer
        start = completion.find(shown) if shown else -1
        if start >= 0:
            break
    tail = completion[start + len(shown) :].strip()
    if start >= 0 and not completion[:start].strip() and tail and prompt.rstrip().endswith(tail):
        # The answer follows the prompt at once and is followed by what the prompt ends with: a
        # template that writes its generation prompt after every conversation,
        # add_generation_prompt or not ("...{% endfor %}[ASSISTANT] "). That header is the next
        # turn's, not the end of the answer's; what it writes for an empty conversation tells
        # it from the turn's end before it (ChatML's "<|im_end|>\n<|im_start|>assistant").
        header = _empty_rendering(compiled, context)
        if header == "":
            return completion  # it writes nothing after every conversation: the tail is the end
        if header and tail.endswith(header):
            return completion[: len(completion) - len(header)].rstrip()
        return completion[: start + len(shown)]  # the header is not known: the answer alone
    return completion


def _answer_regions(
    compiled: jinja2.Template,
    context: dict,
    messages: list[dict[str, str]],
    prompt: str,
    learned: list[int],
    text_special: re.Pattern[str] | None,
) -> list[tuple[int, int]] | str:
    """Where ``prompt`` (rendered from ``messages`` with a generation prompt) writes each earlier
    answer to learn (indices ``learned``), with what the template writes to end its turn
    (ChatML's ``<|im_end|>``): the character ranges a ``chat_answers: all`` row learns besides
    its last answer, in order; or why they cannot be found (the row's ``chat_template_error``).

    An answer is found as it is learned when it is the last one (:func:`_completion`): the
    template's rendering of the conversation before it starts the prompt, and its completion
    follows. A template that writes it otherwise inside a conversation (Qwen3 drops an earlier
    answer's reasoning and writes no empty think block) renders the conversation again with a
    mark for the answer (:func:`_marked_answer`)."""
    regions: list[tuple[int, int]] = []
    for index in learned:
        before = messages[:index]
        try:
            head = compiled.render(context, messages=before, add_generation_prompt=True)
        except Exception as err:  # the whole conversation rendered, not its start
            return f"the conversation up to message {index + 1}: {_error_message(err)}"
        completion = None
        if prompt.startswith(head):
            message = messages[index]
            completion = _completion(
                compiled,
                context,
                before,
                head,
                message["content"],
                text_special,
                message.get("tool_calls"),
            )
        if completion and prompt.startswith(completion, len(head)):
            region: tuple[int, int] | None = (len(head), len(head) + len(completion))
        else:
            region = _marked_answer(compiled, context, messages, index, prompt, head)
        if region is None or (regions and region[0] < regions[-1][1]):
            found = (
                f"message {index + 1} (assistant), an answer to learn, is not found where the "
                "template writes the conversation (it writes it twice, or otherwise than last)"
            )
            if messages[index].get("tool_calls"):
                return found
            return found + ": chat_answers: every learns it in a row of its own"
        if region[0] < region[1]:  # else the template writes nothing of it there
            regions.append(region)
    return regions


_ANSWER_MARKS = tuple(map(chr, range(0xE002, 0xE102)))
"""Private-use characters, one of which (one no message holds) is rendered in an answer's place
to find where a template writes it."""


def _marked_answer(
    compiled: jinja2.Template,
    context: dict,
    messages: list[dict[str, str]],
    index: int,
    prompt: str,
    head: str,
) -> tuple[int, int] | None:
    """Where ``prompt`` writes answer ``index`` when the template writes it otherwise than as a last
    answer: the conversation is rendered with a mark (:data:`_ANSWER_MARKS`) as that answer, and the
    answer is what the prompt holds where the two renderings differ, which must be the mark alone
    (an empty range, not learned: the template writes nothing of the answer there, as Qwen3 does of
    one that is only reasoning). What the template writes around the mark as a last answer (its
    completion) extends the range when the prompt writes it there too: the turn's end after it, a
    lead-in (a think block) before it. None when the answer cannot be found so."""
    text = json.dumps(messages, ensure_ascii=False)  # tool calls too
    mark = next((m for m in _ANSWER_MARKS if m not in text), None)
    if mark is None:
        return None
    marked = [*messages[:index], {"role": "assistant", "content": mark}]
    try:
        shown = compiled.render(
            context, messages=marked + messages[index + 1 :], add_generation_prompt=True
        )
    except Exception:  # the template reads the answer: it cannot be marked
        return None
    start = _shared_start(prompt, shown)
    same_end = _shared_start(prompt[start:][::-1], shown[start:][::-1])
    end = len(prompt) - same_end
    if shown[start : len(shown) - same_end] != mark or start > end:
        return None
    if start == end:  # written as nothing: its turn's end alone would teach an empty reply
        return start, end
    around = None
    if prompt.startswith(head):
        around = _completion(compiled, context, messages[:index], head, mark, None)
    if around is None:
        # A template that writes its generation prompt otherwise (DeepSeek-R1's opens a think
        # block there): the turn's end is what follows the answer when it ends the conversation.
        try:
            last = compiled.render(context, messages=marked, add_generation_prompt=False)
        except Exception:
            last = ""
        if last.count(mark) == 1:
            trail = last.split(mark)[1].rstrip()
            header = _empty_rendering(compiled, context)
            if header and trail.endswith(header):  # written after every conversation
                trail = trail[: len(trail) - len(header)].rstrip()
            around = mark + trail
    if around is not None and around.count(mark) == 1:
        lead, trail = around.split(mark)
        if lead and prompt.endswith(lead, len(head), start):
            start -= len(lead)
        # The longest part of the trail up to a whitespace that the prompt writes there too:
        # Phi-3.5 ends a last answer with "<|end|>\n<|endoftext|>", an earlier one with "<|end|>".
        cuts = [found.start() for found in re.finditer(r"\s+", trail)] + [len(trail)]
        end += next((cut for cut in reversed(cuts) if prompt.startswith(trail[:cut], end)), 0)
    return start, end


def _shared_start(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    shorter = min(len(a), len(b))
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), shorter)


def _empty_rendering(compiled: jinja2.Template, context: dict) -> str | None:
    """What ``compiled`` writes for an empty conversation without a generation prompt, stripped
    and without a leading BOS (None if it fails): the header a template writes after every
    conversation."""
    try:
        written = compiled.render(context, messages=[], add_generation_prompt=False).strip()
    except Exception:  # a template may refuse an empty conversation
        return None
    bos = context.get("bos_token")
    if isinstance(bos, str) and bos and written.startswith(bos):
        written = written[len(bos) :].lstrip()  # a template's BOS starts every conversation
    return written


_MARK_START, _MARK_END = "\ue000", "\ue001"
"""Private-use characters wrapped around each control token of a message while the template
renders, so a token the template writes into the prompt is told from the template's own markup
(as transformers' ``mark_control_tokens`` does)."""
_MARKS = (_MARK_START, _MARK_END)
_MARKED = re.compile(f"{_MARK_START}(.+?){_MARK_END}", re.DOTALL)
_MARK_SUB = f"{_MARK_START}\\g<0>{_MARK_END}"


def _control_tokens_in(history: list[dict[str, str]], special: re.Pattern[str]) -> str | None:
    """The first control token any message's content holds (roles are chat role names)."""
    for message in history:
        if found := special.search(message["content"] or ""):
            return found.group()
    return None


def _control_token_in_calls(row: _ChatRow, special: re.Pattern[str]) -> str | None:
    """Why a row's tool calls or tools are refused: one holds a control token, which the
    template would write into the prompt (or the learned tokens) as the token itself; None when
    none does. (Contents are checked by :func:`_control_tokens_in`.)"""
    parts = [
        (f"message {number} (assistant)'s tool calls", message["tool_calls"])
        for number, message in enumerate(row.history, 1)
        if message.get("tool_calls")
    ]
    parts += [
        (f"message {number} ({message['role']})'s {key}", message[key])
        for number, message in enumerate(row.history, 1)
        for key in ("tool_call_id", "name")
        if message.get(key)
    ]
    parts += [("the answer's tool calls", row.calls)] if row.calls else []
    parts += [("the tools", row.tools)] if row.tools else []
    for where, value in parts:
        if found := special.search(json.dumps(value, ensure_ascii=False)):
            return (
                f"{where} hold {found.group()!r}, a special or markup token of the tokenizer, "
                "which the template would write as that token"
            )
    return None


def _marked(history: list[dict[str, Any]], special: re.Pattern[str]) -> list[dict[str, Any]]:
    return [
        {**message, "content": special.sub(_MARK_SUB, message["content"])}
        if message["content"]
        else message
        for message in history
    ]


def _held_reject(history: list[dict[str, str]], token: str) -> tuple[str, str]:
    """The ``special_token_in_chat`` reject of a conversation whose ``token`` would reach the
    prompt, naming the first message that holds it."""
    number, role = next(
        (n, m["role"]) for n, m in enumerate(history, 1) if token in (m["content"] or "")
    )
    value = (
        f"message {number} ({role}) holds {token!r}, a special or markup token of the tokenizer, "
        "which the template writes into the prompt"
    )
    return SPECIAL_TOKEN_IN_CHAT, value[:SAMPLE_CHARS]


def _error_message(err: Exception) -> str:
    """A template error's message; other exceptions (a ``TypeError`` from the template's own
    expressions) keep their type's name, which their message alone may not make clear."""
    import jinja2

    message = str(err) if isinstance(err, jinja2.TemplateError) else f"{type(err).__name__}: {err}"
    return message[:SAMPLE_CHARS]
