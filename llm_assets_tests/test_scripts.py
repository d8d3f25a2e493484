"""The set-up scripts install for what is run: the runtime for a run, the test tools and torch for
the tests, each once (a stamp per set)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import requires

from llm_assets_tests.conftest import REPO


def _setup(folder, what: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(folder / "scripts" / "setup.sh"), what],
        capture_output=True,
        text=True,
        check=False,
    )


def test_setup_installs_each_set_once_and_the_test_set_holds_the_runtime(tmp_path):
    """A copy of the repository's scripts with a .venv whose python only logs what pip is asked."""
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    log = tmp_path / "pip.log"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    python.chmod(0o755)

    def installs(what: str) -> list[str]:
        log.unlink(missing_ok=True)
        assert _setup(tmp_path, what).returncode == 0
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if "--upgrade pip" not in line]

    assert installs("runtime") == ["-m pip install --quiet -e ."]
    assert installs("runtime") == []
    assert installs("test") == ["-m pip install --quiet -e .[dev,torch,peers]"]
    assert installs("test") == []
    stamp = tmp_path / ".venv" / ".llm-assets-runtime"
    os.utime(stamp, (0, 0))  # pyproject.toml is newer than the stamp: install again
    assert installs("runtime") == ["-m pip install --quiet -e ."]


def test_a_failed_install_shows_pip_s_output_and_sets_no_stamp(tmp_path):
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "no matching distribution for $*"\nexit 1\n')
    python.chmod(0o755)
    result = _setup(tmp_path, "runtime")
    assert result.returncode == 1
    assert "no matching distribution for -m pip install" in result.stderr
    assert f"its whole output is in {tmp_path}/.venv/pip-install.log" in result.stderr
    assert not (tmp_path / ".venv" / ".llm-assets-runtime").exists()


def test_setup_refuses_an_unknown_set_before_doing_anything():
    result = _setup(REPO, "everything")
    assert result.returncode == 2
    assert "usage: bash scripts/setup.sh runtime|test" in result.stderr


def test_the_run_command_installs_the_runtime_and_the_tests_the_test_set():
    run = (REPO / "scripts" / "run_pipeline.sh").read_text()
    tests = (REPO / "scripts" / "test.sh").read_text()
    assert "bash scripts/setup.sh runtime\n" in run
    assert "bash scripts/setup.sh test\n" in tests


def test_the_runtime_holds_neither_torch_nor_test_tools_and_the_reader_needs_none():
    runtime = {
        re.split(r"[<>=;\[ ]", dep)[0]
        for dep in requires("llm-assets") or []
        if "extra ==" not in dep
    }
    assert not runtime & {"torch", "pytest", "hypothesis", "ruff", "playwright"}
    # torch blocked as if not installed: the reader still imports.
    code = "import sys; sys.modules['torch'] = None; import llm_assets.reader"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_every_serial_test_file_exists():
    """The files kept on one xdist worker are named by path: a moved file would silently run
    beside the others and compete for the cores."""
    from llm_assets_tests.conftest import SERIAL_FILES

    assert [name for name in SERIAL_FILES if not (REPO / "llm_assets_tests" / name).is_file()] == []
