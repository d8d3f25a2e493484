"""benchmarks/compare_study.py from the command line: bad arguments, and --no-ceiling."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from llm_assets_tests.bench.test_plan import TOO_LARGE, TOO_MANY_WORKERS
from llm_assets_tests.conftest import REPO

TINY = ["--sizes", "200", "--backends", "in_process", "--reference", "", "--peers", "",
        "--repetitions", "1", "--no-warmup", "--no-ceiling"]  # fmt: skip
"""A run of seconds: each test's own arguments come after it (argparse keeps the last)."""


def _compare_study() -> ModuleType:
    """The script as a module (``benchmarks/`` is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "compare_study", REPO / "benchmarks" / "compare_study.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sizes", "abc"], "argument --sizes: 'abc' is not a row count"),
        (["--sizes", "0"], "argument --sizes: '0': a row count here must be >= 1"),
        (["--sizes", ","], "argument --sizes: give at least one size"),
        (["--backends", "foo"], "argument --backends: unknown backend 'foo'; choose from"),
        (["--reference", "dask"], "argument --reference: unknown study runner 'dask'"),
        (["--reference-max-rows", "ray"], "'ray' is not runner=rows (e.g. ray=32000)"),
        (["--reference-max-rows", "ray=x"], "'x' is not a row count"),
        (["--reference-max-rows", "mp=5"], "unknown study runner 'mp'"),
        (["--repetitions", "0"], "repetitions must be >= 1, got 0"),
        (["--workers", str(TOO_MANY_WORKERS)], f"workers {TOO_MANY_WORKERS} is more than"),
        (["--sizes", str(TOO_LARGE)], "100,000,000,000 rows need about 55,000.0 GB"),
    ],
)
def test_a_bad_argument_is_a_one_line_usage_error(tmp_path, capsys, args, message):
    """--sizes abc, --reference-max-rows ray, --sizes 0, --backends foo and --sizes 10**11 are
    usage errors (exit code 2) with a message, not a traceback or a ~55 TB corpus."""
    script = _compare_study()
    data, out = tmp_path / "data", tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        script.main([*TINY, *args, "--data-dir", str(data), "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "error:" in last and message in last, err
    assert not data.exists() and not out.exists()  # nothing generated or written


def test_no_ceiling_prints_no_empty_ceiling_tables(tmp_path, capsys):
    """--no-ceiling prints neither the ceiling nor the "where the time goes" table, not even an
    empty header."""
    script = _compare_study()
    args = [*TINY, "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    assert script.main(args) == 0
    printed = capsys.readouterr().out
    assert "### Our pipeline" in printed and "| 200 | in_process |" in printed
    assert "### Targets" in printed
    assert "Tokenizer-only ceiling" not in printed
    assert "Where the time goes" not in printed
    (report,) = (tmp_path / "out").glob("compare-*.md")
    assert "Tokenizer-only ceiling" not in report.read_text()
