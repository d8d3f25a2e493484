"""Decontamination kernel: which documents share an n-gram with an eval set, what the reject
says, how eval files are read, and what happens to each kind of bad eval set."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels import decontam
from llm_assets.kernels.decontam import (
    CONTAMINATED,
    DecontamSpec,
    EvalSetError,
    decontam_filter,
    eval_index,
    read_eval_texts,
)
from llm_assets.kernels.filters.chain import FilterSpec, filter_table
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.kernels.normalize import NormalizeSpec, normalize_array
from llm_assets.kernels.schema import PROMPT

QUESTION = "Which river flows through the old city of Prague before it joins the Elbe at Melnik?"
CHOICE = "The Vltava river flows north through Prague and joins the Elbe"


def _docs(*texts: str, **columns: list) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "doc_id": [f"d{i}" for i in range(n)],
            "source_file": ["train.jsonl"] * n,
            "source_line": list(range(1, n + 1)),
            "text": list(texts),
            **columns,
        }
    )


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _spec(path: Path, **kwargs) -> DecontamSpec:
    return DecontamSpec(files=((str(path), path.name),), **kwargs)


@pytest.fixture
def mcq(tmp_path) -> DecontamSpec:
    """A multiple-choice eval set: a question, choices (a list), an answer index."""
    path = _jsonl(
        tmp_path / "mcq.jsonl",
        [
            {"question": QUESTION, "choices": [CHOICE, "Danube", "Rhine"], "answer": 0},
            {"question": "Name the capital of Czechia.", "choices": ["Prague", "Brno"]},
        ],
    )
    return _spec(path, fields=("question", "choices"))


def test_a_document_holding_13_words_of_a_question_is_rejected_whatever_its_case_and_punctuation(
    mcq,
):
    """Case, punctuation and spacing differ from the eval set: still one n-gram. The value
    names the eval record and field, quotes the n-gram in canonical words and counts them."""
    doc = "Quiz night! WHICH river flows through the old city of Prague -- before it joins THE..."
    result = decontam_filter(_docs(doc, "A text about rivers in general, nothing else."), mcq)
    assert result.kept["doc_id"].to_pylist() == ["d1"]
    (reject,) = result.rejects.to_pylist()
    assert reject["reason"] == CONTAMINATED and reject["stage"] == "filter"
    assert reject["value"] == (
        'mcq.jsonl:1 question: "which river flows through the old city of prague before it '
        'joins the" (13 words; 1 shared n-gram)'
    )
    whole = decontam_filter(_docs(f"Intro. {QUESTION} Outro."), mcq).rejects.to_pylist()
    assert whole[0]["value"].endswith("(13 words; 4 shared n-grams)")  # 16 words: 4 13-grams


def test_twelve_shared_words_or_words_across_two_fields_are_not_contamination(mcq):
    """12 consecutive words of the question are below the n-gram; the question's end followed
    by a choice's start is no eval text's n-gram (n-grams do not cross fields)."""
    twelve = "which river flows through the old city of Prague before it joins a river"
    across = "it joins the Elbe at Melnik? The Vltava river flows north through"
    result = decontam_filter(_docs(twelve, across), mcq)
    assert result.rejects.num_rows == 0 and result.kept.num_rows == 2


def test_choices_in_a_list_are_eval_texts_and_short_ones_are_not_checked(mcq):
    """An 11-word choice is matched whole (at least min_ngram words); ``Danube``, ``Prague`` and
    the 5-word question are not checked, so ordinary text holding them is kept."""
    index = eval_index(mcq)
    assert (index.records, index.texts, index.checked, index.short) == (2, 7, 2, 5)
    assert index.lengths == (11, 13)
    caught = f"Everyone knows that {CHOICE.lower()}, say the guides."
    kept = "Name the capital of Czechia: Prague, on the Vltava; the Danube is elsewhere."
    result = decontam_filter(_docs(caught, kept), mcq)
    assert result.kept["doc_id"].to_pylist() == ["d1"]
    assert result.rejects["value"][0].as_py() == (
        'mcq.jsonl:1 choices: "the vltava river flows north through prague and joins the elbe" '
        "(11 words; 1 shared n-gram)"
    )
    nine = _spec(mcq.files[0][0] and Path(mcq.files[0][0]), fields=("question", "choices"))
    stricter = DecontamSpec(files=nine.files, fields=nine.fields, min_ngram=12)
    assert eval_index(stricter).checked == 1  # the 11-word choice is now too short


def test_the_longest_shared_n_gram_names_the_eval_text(tmp_path):
    """A document sharing a 9-word answer and a 13-gram of a question is reported by the
    question (the longer match), and both count."""
    path = _jsonl(
        tmp_path / "qa.jsonl",
        [
            {"text": "the answer is the Vltava river in Bohemia today"},
            {"text": QUESTION},
        ],
    )
    doc = f"The answer is the Vltava river in Bohemia today. {QUESTION}"
    (reject,) = decontam_filter(_docs(doc), _spec(path)).rejects.to_pylist()
    assert reject["value"].startswith('qa.jsonl:2 text: "which river flows')
    assert reject["value"].endswith("(13 words; 5 shared n-grams)")


def test_sft_rows_are_checked_on_their_prompt_too(mcq):
    """An instruction that copies the benchmark question is caught though the answer is new."""
    table = _docs(
        "The Vltava.",
        "The Vltava.",
        prompt=[f"Answer briefly: {QUESTION}", "Answer briefly: which river is longest?"],
    )
    result = decontam_filter(table, mcq)
    assert result.kept["doc_id"].to_pylist() == ["d1"]
    assert PROMPT in result.kept.column_names


def test_eval_texts_get_the_documents_normalization(tmp_path):
    """With the study's ``ascii_lower`` preset the documents lost accents and apostrophes; the
    eval text is normalized alike before its words are compared, so it still matches."""
    question = (
        "Don't forget: the café on Wenceslas Square serves the best trdelník in Praha, right?"
    )
    path = _jsonl(tmp_path / "e.jsonl", [{"text": question}])
    ascii_lower = NormalizeSpec(preset="ascii_lower")
    doc = normalize_array(pa.array([f"Review: {question}"]), ascii_lower)[0].as_py()
    assert "caf " in doc and "dont" in doc
    matched = decontam_filter(_docs(doc), _spec(path, normalize=ascii_lower))
    assert matched.rejects.num_rows == 1
    # Compared without the preset, every 13 words of the question hold "café" or "trdelník",
    # which the document spells "caf" and "trdelnk": no match.
    assert decontam_filter(_docs(doc), _spec(path)).rejects.num_rows == 0


def test_every_input_format_of_raw_documents_is_an_eval_set(tmp_path):
    """JSON Lines gzip, Parquet with a list column, CSV, TXT paragraphs: each text is found and
    named by its file and line (TXT: the paragraph's first line, no field)."""
    texts = [
        f"eval sentence number {i} with enough plain words to make thirteen of them"
        for i in range(4)
    ]
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(json.dumps({"q": texts[0]}).encode() + b"\n"))
    pq.write_table(pa.table({"q": ["short"], "opts": [[texts[1]]]}), tmp_path / "b.parquet")
    (tmp_path / "c.csv").write_text(f"id,q\n1,{texts[2]}\n")
    (tmp_path / "d.txt").write_text(f"\n\n{texts[3]}\n")
    files = tuple((str(tmp_path / n), n) for n in ("a.jsonl.gz", "b.parquet", "c.csv", "d.txt"))
    spec = DecontamSpec(files=files, fields=("q", "opts"))
    read = read_eval_texts(spec)
    assert list(read.where) == [
        "a.jsonl.gz:1 q",
        "b.parquet:1 q",
        "b.parquet:1 opts",
        "c.csv:1 q",
        "d.txt:3",
    ]
    assert [t for t in read.texts if t != "short"] == texts
    result = decontam_filter(_docs(*(f"x {t} y" for t in texts), "clean text"), spec)
    assert result.kept["doc_id"].to_pylist() == ["d4"]
    assert [v.split(":")[0] for v in result.rejects["value"].to_pylist()] == [
        "a.jsonl.gz",
        "b.parquet",
        "c.csv",
        "d.txt",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"question": "fine text"}\n{"prompt": "no question here"}\n',
            r"e\.jsonl:2: missing_text .*every record needs the field 'question'",
        ),
        ('{"question": "fine"}\n{"question": \n', r"e\.jsonl:2: invalid_json"),
        ('{"question": ["a", "list"]}\n', r"e\.jsonl:1: non_string_text .*'question'"),
        ("", r"eval set e\.jsonl: empty_file \(no records\)"),
        ('{"question": "only a few words"}\n', r"hold no text of 8 words or more .*\['question'\]"),
    ],
)
def test_a_bad_eval_set_stops_with_its_file_and_line(tmp_path, content, message):
    """Each kind of bad eval set is an error naming the file and line, never a silent skip
    (a skipped record would let its overlap through)."""
    path = tmp_path / "e.jsonl"
    path.write_text(content)
    spec = _spec(path, fields=("question",))
    with pytest.raises(EvalSetError, match=message):
        eval_index(spec)


def test_a_missing_eval_file_is_named(tmp_path):
    spec = _spec(tmp_path / "gone.jsonl")
    with pytest.raises(EvalSetError, match=r"eval set gone\.jsonl: No such file"):
        read_eval_texts(spec)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"files": ()}, "at least one eval file"),
        ({"fields": ()}, "non-empty names"),
        ({"fields": ("q", "q")}, "named twice"),
        ({"ngram": 0}, r"ngram must be in \[1, 64\]"),
        ({"ngram": 65}, r"ngram must be in \[1, 64\]"),
        ({"min_ngram": 14}, r"min_ngram must be in \[1, ngram=13\]"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecontamSpec(**{"files": (("e.jsonl", "e.jsonl"),), **kwargs})


def test_an_edited_eval_set_is_read_again(tmp_path):
    """The index is cached per process while the files are unchanged; an edit is seen."""
    path = _jsonl(tmp_path / "e.jsonl", [{"text": QUESTION}])
    spec = _spec(path)
    assert eval_index(spec) is eval_index(spec)
    assert decontam_filter(_docs(CHOICE), spec).rejects.num_rows == 0
    _jsonl(path, [{"text": QUESTION}, {"text": CHOICE + " today"}])
    os.utime(path, ns=(1, 1))  # a new stamp even within the file system's time resolution
    assert decontam_filter(_docs(CHOICE + " today"), spec).rejects.num_rows == 1


def test_big_batches_are_searched_in_chunks_with_the_same_result(mcq, monkeypatch):
    """Chunks of whole rows bound the n-gram arrays; a row longer than a chunk is one chunk."""
    rng = random.Random(3)
    words = QUESTION.split() + CHOICE.split() + ["alpha", "beta", "gamma"]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 60))) for _ in range(300)]
    texts[7] = f"long {QUESTION} " * 20
    table = _docs(*texts)
    whole = decontam_filter(table, mcq)
    monkeypatch.setattr(decontam, "_CHUNK_WORDS", 50)
    chunked = decontam_filter(table, mcq)
    assert chunked.kept.equals(whole.kept) and chunked.rejects.equals(whole.rejects)
    assert "d7" in whole.rejects["doc_id"].to_pylist()


def _reference(doc: str, evals: list[str], ngram: int, min_ngram: int) -> bool:
    """Decontamination by its definition, with Python sets of word tuples."""

    def words(text: str) -> list[str]:
        out = [re.sub(r"[\W_]+", "", w.lower()) for w in text.split()]
        return [w for w in out if w]

    grams: set[tuple[str, ...]] = set()
    for text in evals:
        ws = words(text)
        if len(ws) >= ngram:
            grams |= {tuple(ws[i : i + ngram]) for i in range(len(ws) - ngram + 1)}
        elif len(ws) >= min_ngram:
            grams.add(tuple(ws))
    ws = words(doc)
    return any(tuple(ws[i : i + len(g)]) == g for g in grams for i in range(len(ws)))


VOCAB = ["a", "b", "c", "A.", "b,", "(c)", "-", "d"]


@settings(max_examples=60, deadline=None)
@given(
    evals=st.lists(st.lists(st.sampled_from(VOCAB), max_size=9), min_size=1, max_size=4),
    docs=st.lists(st.lists(st.sampled_from(VOCAB), max_size=14), min_size=1, max_size=6),
    ngram=st.integers(2, 5),
    data=st.data(),
)
def test_the_kernel_agrees_with_the_definition(tmp_path_factory, evals, docs, ngram, data):
    """On random texts over a tiny vocabulary (many matches, punctuation-only words, short
    texts), a document is rejected exactly when it holds an eval n-gram by the definition."""
    min_ngram = data.draw(st.integers(1, ngram))
    eval_texts = [" ".join(e) for e in evals]
    if not any(
        len([w for w in e if w != "-"]) >= min_ngram for e in evals
    ):  # no checkable eval text: the index refuses, tested above
        return
    path = _jsonl(tmp_path_factory.mktemp("h") / "e.jsonl", [{"text": t} for t in eval_texts])
    spec = _spec(path, ngram=ngram, min_ngram=min_ngram)
    texts = [" ".join(d) for d in docs]
    result = decontam_filter(_docs(*texts), spec)
    rejected = set(result.rejects["doc_id"].to_pylist())
    expected = {f"d{i}" for i, t in enumerate(texts) if _reference(t, eval_texts, ngram, min_ngram)}
    assert rejected == expected


def test_the_filter_chain_runs_it_last_before_dedup(mcq):
    """In ``filter_table`` a contaminated document that is also too short is rejected once, for
    the earlier reason; the others as ``contaminated``."""
    table = _docs(QUESTION, f"More: {QUESTION}", "clean", n_tokens=[5, 30, 30])
    result = filter_table(table, FilterSpec(length=LengthFilterSpec(min_tokens=10), decontam=mcq))
    assert result.kept["doc_id"].to_pylist() == ["d2"]
    assert result.rejects["reason"].to_pylist() == ["too_few_tokens", CONTAMINATED]


def test_a_chat_prompt_is_checked_with_its_markup_as_word_breaks_and_normalized(tmp_path):
    """A rendered ChatML prompt glues the question's last word to ``<|im_end|>``; the markup is
    a word break, so an 11-word question is still matched whole. The prompt, rendered from raw
    fields, gets the documents' normalization: under ``ascii_lower`` an accented question in
    the prompt matches its eval text (both lose the accents)."""
    short = "Which planet in our solar system has the most moons now?"
    french = (
        "Quelle rivière traverse la vieille ville de Prague avant de rejoindre l'Elbe à Mělník?"
    )
    path = _jsonl(tmp_path / "e.jsonl", [{"text": short}, {"text": french}])
    chat = [
        f"<|im_start|>user\n{short}<|im_end|>\n<|im_start|>assistant\n",
        f"<|im_start|>user\n{french}<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nWhich planet has rings?<|im_end|>\n<|im_start|>assistant\n",
    ]
    ascii_lower = NormalizeSpec(preset="ascii_lower")
    for normalize in (NormalizeSpec(), ascii_lower):
        answers = normalize_array(pa.array(["Saturn."] * 3), normalize).to_pylist()
        result = decontam_filter(_docs(*answers, prompt=chat), _spec(path, normalize=normalize))
        assert result.kept["doc_id"].to_pylist() == ["d2"], normalize.preset
        first = result.rejects["value"][0].as_py()
        assert first.startswith('e.jsonl:1 text: "which planet in our solar system has the most')
        assert first.endswith('moons now" (11 words; 1 shared n-gram)')


def test_a_misspelled_optional_field_is_an_error_not_a_silent_skip(mcq, tmp_path):
    """An optional field in no record of any eval set is a misspelling: it would check
    nothing. A field some records lack is fine."""
    typo = DecontamSpec(files=mcq.files, fields=("question", "choise"))
    with pytest.raises(
        EvalSetError,
        match=r"no record of the eval sets \(mcq\.jsonl\) has the field\(s\) \['choise'\]",
    ):
        read_eval_texts(typo)
    some = _jsonl(tmp_path / "s.jsonl", [{"q": QUESTION, "hint": CHOICE}, {"q": QUESTION}])
    assert read_eval_texts(_spec(some, fields=("q", "hint"))).texts == (QUESTION, CHOICE, QUESTION)


def test_an_eval_set_the_documents_preset_empties_says_so(tmp_path):
    """Cyrillic questions under ``ascii_lower`` lose every letter: the error names the preset
    rather than claiming the texts are short."""
    question = "Какая река протекает через старый город Прагу прежде чем впасть в Эльбу у Мельника"
    path = _jsonl(tmp_path / "ru.jsonl", [{"text": question}])
    assert eval_index(_spec(path)).checked == 1
    with pytest.raises(
        EvalSetError, match=r"none once normalized like the documents .*'ascii_lower'"
    ):
        eval_index(_spec(path, normalize=NormalizeSpec(preset="ascii_lower")))
