"""The chats: well-formed conversations with correct answers, deterministic."""

from __future__ import annotations

import re
from collections import Counter

from llm_assets.datagen.chats import generate_chats
from llm_assets.datagen.instructions import generate_instructions
from llm_assets.datagen.vocabulary import _DICTIONARY as DICTIONARY


def test_chats_are_well_formed_conversations_and_deterministic():
    rows = list(generate_chats(800, seed=2))
    assert rows == list(generate_chats(800, seed=2))
    assert rows[:50] == list(generate_chats(50, seed=2))  # streamed: a prefix of a longer run
    assert rows != list(generate_chats(800, seed=3))
    assert [r["id"] for r in rows[:3]] == [f"chat-2-{i:08d}" for i in range(3)]
    exchanges = Counter()
    for row in rows:
        assert list(row) == ["id", "messages"]
        messages = row["messages"]
        assert all(list(m) == ["role", "content"] for m in messages)
        assert all(isinstance(m["content"], str) and m["content"].strip() for m in messages)
        roles = [m["role"] for m in messages]
        turns = roles[1:] if roles[0] == "system" else roles
        assert turns == ["user", "assistant"] * (len(turns) // 2) and turns, roles
        assert roles[-1] == "assistant"
        exchanges[len(turns) // 2] += 1
    assert set(exchanges) == {1, 2, 3}
    assert 0.25 < sum(r["messages"][0]["role"] == "system" for r in rows) / len(rows) < 0.42
    assert (
        len({r["messages"][0]["content"] for r in rows if r["messages"][0]["role"] == "system"}) > 2
    )
    users = [m["content"] for r in rows for m in r["messages"] if m["role"] == "user"]
    assert any(u.startswith("Thanks! And ") for u in users)
    assert any("\n\n" in u for u in users) and any("\n\n" not in u for u in users)


def test_chat_answers_are_correct_for_their_questions():
    operations = {"plus": int.__add__, "minus": int.__sub__, "times": int.__mul__}
    translations = {
        (english, language): foreign
        for english, words in DICTIONARY.items()
        for language, foreign in zip(("German", "French", "Spanish"), words, strict=True)
    }
    checked = Counter()
    for row in generate_chats(1500, seed=4):
        messages = [m for m in row["messages"] if m["role"] != "system"]
        last_result, last_word = None, None
        for question, answer in zip(messages[::2], messages[1::2], strict=True):
            q, a = question["content"], answer["content"]
            if match := re.search(r"[Ww]hat is (\d+) (plus|minus|times) (\d+)\?$", q):
                x, op, y = match.groups()
                result = operations[op](int(x), int(y))
                assert a == f"{x} {op} {y} is {result}.", (q, a)
                last_result, last_word = result, None
                checked["arithmetic"] += 1
            elif match := re.fullmatch(r"Thanks! And what is that (plus|times) (\d+)\?", q):
                op, y = match.groups()
                assert last_result is not None, row
                result = operations[op](last_result, int(y))
                assert a == f"{last_result} {op} {y} is {result}.", (q, a)
                last_result = None
                checked["follow-up sum"] += 1
            elif match := re.search(r'ranslate the word "(\w+)" into (\w+)\.$', q):
                word, language = match.groups()
                assert a == f'In {language}, "{word}" is "{translations[word, language]}".'
                last_result, last_word = None, (word, language)
                checked["translation"] += 1
            elif match := re.fullmatch(r"Thanks! And in (\w+)\?", q):
                assert last_word is not None and last_word[1] != match[1], row
                word, language = last_word[0], match[1]
                assert a == f'In {language}, "{word}" is "{translations[word, language]}".'
                last_word = None
                checked["follow-up translation"] += 1
            else:
                if "ort the following words alphabetically.\n\n" in q:
                    words = q.split("\n\n", 1)[1]
                    assert a == ", ".join(sorted(words.split(", ")))
                    checked["sort"] += 1
                last_result = last_word = None
    assert min(checked.values()) > 5 and len(checked) == 5, checked


def test_chats_leave_the_instructions_alone():
    """generate_chats has random streams of its own: the instructions of a seed do not depend on
    whether (or how many) chats were generated before or between them."""
    first = list(generate_instructions(50, seed=0))
    chats = generate_chats(100, seed=0)
    next(chats)
    instructions = generate_instructions(50, seed=0)
    mixed = []
    for row in instructions:
        mixed.append(row)
        next(chats)
    assert mixed == first
