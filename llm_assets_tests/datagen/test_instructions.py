"""The instruction rows: correct answers, deterministic."""

from __future__ import annotations

import re

from llm_assets.datagen.instructions import generate_instructions


def test_instructions_are_correct_and_deterministic():
    rows = list(generate_instructions(600, seed=2))
    assert rows == list(generate_instructions(600, seed=2))
    assert all(list(r) == ["instruction", "input", "output"] and r["output"] for r in rows)
    assert 0.2 < sum(not r["input"] for r in rows) / len(rows) < 0.5
    assert len({r["instruction"].split()[0] for r in rows}) >= 8
    operations = {"plus": int.__add__, "minus": int.__sub__, "times": int.__mul__}
    checked = 0
    for row in rows:
        match = re.fullmatch(r"What is (\d+) (plus|minus|times) (\d+)\?", row["instruction"])
        if match:
            a, op, b = match.groups()
            assert row["output"] == f"{a} {op} {b} is {operations[op](int(a), int(b))}."
            checked += 1
        if row["instruction"].startswith("Sort"):
            assert row["output"] == ", ".join(sorted(row["input"].split(", ")))
    assert checked > 10
