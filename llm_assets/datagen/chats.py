"""Conversations ``{"id", "messages"}`` for supervised fine-tuning (:func:`generate_chats`)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from typing import Any

from llm_assets.datagen.instructions import _task_paragraphs, _tasks
from llm_assets.datagen.reviews import generate_reviews
from llm_assets.datagen.vocabulary import _DICTIONARY, _LANGUAGE_NAMES, LANGUAGES, _items

_CHAT_RECORDS_SEED = 1 << 32
"""Added to the seed of the paragraphs :func:`generate_chats` draws its texts from, so that they
are not the paragraphs of :func:`generate_instructions` or of a corpus of a small seed."""
_SYSTEM_PROMPTS = _items(
    """You are a helpful assistant.|
    You are a helpful assistant. Answer accurately and briefly.|
    You are a careful assistant: answer exactly what is asked, nothing more.|
    You are an assistant for an encyclopedia project. You summarize and classify texts, answer
    questions about places, words and numbers, and do small calculations."""
)
_SYSTEM_SHARE = 1 / 3
_EXCHANGE_COUNTS = (1, 2, 3)
_EXCHANGE_WEIGHTS = (0.5, 0.3, 0.2)
_FOLLOW_UP_SHARE = 0.4
"""Of the later exchanges whose previous question allows one: the share that asks about it again
(``Thanks! And what is that times 7?``) rather than asking something else."""
_NEXT_OPENERS = ("Thanks! And ", "Great, thank you. ", "One more question. ", "Next: ", "")
"""Put before a later exchange's question (after ``Thanks! And `` it starts in lowercase)."""
_ARITHMETIC_QUESTION = re.compile(r"What is (-?\d+) (plus|minus|times) (\d+)\?")
_TRANSLATE_QUESTION = re.compile(r'Translate the word "([a-z]+)" into ([A-Z][a-z]+)\.')
_OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "plus": int.__add__,
    "minus": int.__sub__,
    "times": int.__mul__,
}


def generate_chats(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield ``n`` conversation rows ``{"id", "messages"}`` for chat fine-tuning.

    ``messages`` is a list of ``{"role", "content"}``: about a third start with a ``system``
    message (one of a few prompts), then 1 to 3 exchanges of a ``user`` question and the
    ``assistant``'s answer; the last message is always the assistant's. The questions are
    :func:`generate_instructions`' tasks (the content is the instruction, then a blank line and
    the input when there is one); a later question is another task (``Thanks! And ...``) or a
    follow-up on the previous one (the same sum carried on, the same word in another language).
    Every answer is correct for its question. Ids are ``chat-<seed>-<i>`` (``i`` in 8 digits).

    A random stream of its own: the instructions and the sample files do not change with it.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rnd = random.Random(f"chats:{seed}")
    tasks = _tasks(_task_paragraphs(seed + _CHAT_RECORDS_SEED, 800), _chat_reviews(seed))
    for i in range(n):
        messages: list[dict[str, str]] = []
        if rnd.random() < _SYSTEM_SHARE:
            messages.append({"role": "system", "content": rnd.choice(_SYSTEM_PROMPTS)})
        exchanges = rnd.choices(_EXCHANGE_COUNTS, weights=_EXCHANGE_WEIGHTS)[0]
        previous: tuple[str, str, str] | None = None
        for exchange in range(exchanges):
            follow_up = _follow_up(previous, rnd) if previous is not None else None
            if follow_up is not None and rnd.random() < _FOLLOW_UP_SHARE:
                question, answer = follow_up
                previous = None  # a follow-up is not followed up again
            else:
                previous = rnd.choice(tasks)(rnd)
                instruction, task_input, answer = previous
                question = instruction + (f"\n\n{task_input}" if task_input else "")
                if exchange:
                    question = _next_question(question, rnd)
            messages.append({"role": "user", "content": question})
            messages.append({"role": "assistant", "content": answer})
        yield {"id": f"chat-{seed}-{i:08d}", "messages": messages}


def _chat_reviews(seed: int) -> Iterator[dict[str, Any]]:
    """Reviews for :func:`generate_chats`: like :func:`generate_reviews` on a stream of their
    own (``generate_reviews(..., seed)`` is what the instructions of that seed use)."""
    return generate_reviews(2**62, seed + _CHAT_RECORDS_SEED)


def _next_question(question: str, rnd: random.Random) -> str:
    opener = rnd.choice(_NEXT_OPENERS)
    if opener.endswith("And "):
        return opener + question[0].lower() + question[1:]
    return opener + question


def _follow_up(task: tuple[str, str, str], rnd: random.Random) -> tuple[str, str] | None:
    """A question about the previous task's question and its correct answer, or None if there is
    none for this task (only arithmetic and translations have one)."""
    instruction = task[0]
    if match := _ARITHMETIC_QUESTION.fullmatch(instruction):
        a, name, b = int(match[1]), match[2], int(match[3])
        result = _OPERATIONS[name](a, b)
        name, c = rnd.choice((("plus", rnd.randint(2, 99)), ("times", rnd.randint(2, 9))))
        return (
            f"Thanks! And what is that {name} {c}?",
            f"{result} {name} {c} is {_OPERATIONS[name](result, c)}.",
        )
    if match := _TRANSLATE_QUESTION.fullmatch(instruction):
        word, language = match[1], match[2]
        others = [
            (code, name)
            for code, name in _LANGUAGE_NAMES.items()
            if code != "en" and name != language
        ]
        code, name = rnd.choice(others)
        foreign = _DICTIONARY[word][LANGUAGES.index(code) - 1]
        return f"Thanks! And in {name}?", f'In {name}, "{word}" is "{foreign}".'
    return None
