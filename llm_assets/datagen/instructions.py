"""Supervised fine-tuning rows ``instruction, input, output`` whose outputs are correct."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from llm_assets.datagen.corpus import KIND_PARAGRAPH, generate_records
from llm_assets.datagen.grammar import PLAIN
from llm_assets.datagen.reviews import generate_reviews, sentiment_of
from llm_assets.datagen.vocabulary import _CAPITALS, _DICTIONARY, _LANGUAGE_NAMES, _NOUNS, LANGUAGES

_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")


def generate_instructions(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield ``n`` instruction-tuning rows ``{"instruction", "input", "output"}``.

    A dozen task types (summary, title, sentiment, star rating, arithmetic, capitals,
    translation, sorting, word counts, lowercasing, listing, year extraction); every output is
    correct for its input. About a third of the rows have an empty ``input``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rnd = random.Random(f"instructions:{seed}")
    tasks = _tasks(_task_paragraphs(seed, 1200), generate_reviews(2**62, seed))
    for _ in range(n):
        instruction, task_input, output = rnd.choice(tasks)(rnd)
        yield {"instruction": instruction, "input": task_input, "output": output}


_Task = Callable[[random.Random], tuple[str, str, str]]
"""An instruction task: draws from the random stream it is given, returns ``(instruction, input,
output)``."""


def _tasks(
    paragraphs: Iterator[Mapping[str, Any]], reviews: Iterator[Mapping[str, Any]]
) -> tuple[_Task, ...]:
    """The task types of :func:`generate_instructions` (and :func:`generate_chats`), taking their
    texts from ``paragraphs`` (records with ``text`` and ``title``) and ``reviews``."""
    return (
        lambda r: _summarize(next(paragraphs)),
        lambda r: _suggest_title(next(paragraphs)),
        lambda r: _classify_sentiment(next(reviews)),
        lambda r: _predict_rating(next(reviews)),
        _arithmetic,
        _capital,
        _translate,
        _sort_words,
        lambda r: _count_words(next(paragraphs)),
        lambda r: _lowercase(next(paragraphs)),
        _list_items,
        lambda r: _extract_years(next(paragraphs)),
    )


def _task_paragraphs(seed: int, max_chars: int) -> Iterator[dict[str, Any]]:
    """English paragraphs of 150 to ``max_chars`` characters, for the tasks to summarize, title
    and count (an endless stream)."""
    return (
        record
        for record in generate_records(
            2**62, seed, languages=("en",), duplicate_fraction=0.0, style=PLAIN, with_meta=True
        )
        if record["kind"] == KIND_PARAGRAPH and 150 <= len(record["text"]) <= max_chars
    )


def _first_sentence(text: str) -> str:
    match = _FIRST_SENTENCE.match(text)
    return match.group(1) if match else text


def _summarize(record: Mapping[str, Any]) -> tuple[str, str, str]:
    text = record["text"]
    return "Summarize the following paragraph in one sentence.", text, _first_sentence(text)


def _suggest_title(record: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        "Which encyclopedia article is the following paragraph most likely taken from?",
        record["text"],
        record["title"],
    )


def _classify_sentiment(review: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        "Classify the sentiment of this product review as positive, negative or neutral.",
        review["text"],
        sentiment_of(review["rating"]),
    )


def _predict_rating(review: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        "How many stars, from 1 to 5, did the author of this review most likely give?",
        f"{review['title']}. {review['text']}",
        str(review["rating"]),
    )


def _arithmetic(rnd: random.Random) -> tuple[str, str, str]:
    a, b = rnd.randint(2, 999), rnd.randint(2, 99)
    name, result = rnd.choice(
        (("plus", a + b), ("minus", a - b), ("times", a * b), ("plus", a + b))
    )
    return f"What is {a} {name} {b}?", "", f"{a} {name} {b} is {result}."


def _capital(rnd: random.Random) -> tuple[str, str, str]:
    country = rnd.choice(tuple(_CAPITALS))
    capital = _CAPITALS[country]
    end = "" if capital.endswith(".") else "."  # "Washington, D.C." ends the sentence itself
    return f"What is the capital of {country}?", "", f"The capital of {country} is {capital}{end}"


def _translate(rnd: random.Random) -> tuple[str, str, str]:
    word = rnd.choice(tuple(_DICTIONARY))
    index = rnd.randrange(3)
    language = _LANGUAGE_NAMES[LANGUAGES[index + 1]]
    foreign = _DICTIONARY[word][index]
    instruction = f'Translate the word "{word}" into {language}.'
    return instruction, "", f'In {language}, "{word}" is "{foreign}".'


def _sort_words(rnd: random.Random) -> tuple[str, str, str]:
    words = rnd.sample(_NOUNS, rnd.randint(4, 9))
    return "Sort the following words alphabetically.", ", ".join(words), ", ".join(sorted(words))


def _count_words(record: Mapping[str, Any]) -> tuple[str, str, str]:
    sentence = _first_sentence(record["text"])
    count = len(re.findall(r"[A-Za-zÀ-ÿ0-9'’£$-]+(?:[.,][0-9]+)*", sentence))
    return "How many words are in the following sentence?", sentence, str(count)


def _lowercase(record: Mapping[str, Any]) -> tuple[str, str, str]:
    sentence = _first_sentence(record["text"])
    return "Rewrite the following sentence in lowercase letters.", sentence, sentence.lower()


def _list_items(rnd: random.Random) -> tuple[str, str, str]:
    category, pool = rnd.choice(
        (
            ("European capital cities", ("Paris", "Berlin", "Rome", "Madrid", "Lisbon", "Vienna")),
            ("colours", ("red", "blue", "green", "yellow", "purple", "orange", "white")),
            ("fruits", ("apple", "pear", "banana", "cherry", "plum", "orange", "grape")),
            ("musical instruments", ("piano", "violin", "guitar", "flute", "trumpet", "cello")),
        )
    )
    items = rnd.sample(pool, 3)
    output = "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    return f"List three {category}.", "", output


def _extract_years(record: Mapping[str, Any]) -> tuple[str, str, str]:
    text = record["text"]
    years = list(dict.fromkeys(_YEAR.findall(text)))
    output = ", ".join(years) if years else "The text mentions no year."
    return "List the years mentioned in the following text, in order of appearance.", text, output
