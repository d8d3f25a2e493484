"""A filter plugin as users add one: ``examples/plugin_filter`` installed by pip, found
through the entry-point group, configured under ``filtered_documents.config``, fingerprinted
with its version, and run by ``dagster job execute`` with its ``run.yaml``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_assets.constants import CATALOG_FILE, DEFAULT_WAREHOUSE_DIR, PIPELINE_JOB
from llm_assets.kernels.filters import registry
from llm_assets.kernels.filters.chain import FilterSpec, filter_table
from llm_assets.warehouse.catalog import Catalog
from llm_assets_tests.conftest import REPO

EXAMPLE = REPO / "examples" / "plugin_filter"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True, timeout=300)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Iterator[Path]:
    """The example installed, as pip installs it, into a folder of this module's own on
    ``sys.path`` (and on ``PYTHONPATH`` for the runs it starts): no other test process, and no
    test run beside this one, sees the plugin."""
    target = tmp_path_factory.mktemp("plugin_site")
    source = tmp_path_factory.mktemp("plugin_source") / "plugin_filter"
    shutil.copytree(EXAMPLE, source)  # pip builds in place: keep the example's folder clean
    _pip("install", "--no-deps", "--no-build-isolation", "--target", str(target), str(source))
    sys.path.insert(0, str(target))
    registry.plugins.cache_clear()
    registry.registry.cache_clear()
    try:
        yield target
    finally:
        sys.path.remove(str(target))
        registry.plugins.cache_clear()
        registry.registry.cache_clear()


@pytest.fixture(scope="module")
def plugin(plugin_dir: Path) -> type:
    (cls,) = registry.plugins()
    return cls


def test_the_plugin_is_registered_before_the_dedup_annotation(plugin):
    assert plugin.name == "url_ratio"
    assert registry.registry()[-2:] == (plugin, registry.DedupAnnotation)
    assert registry.setting_of("url_ratio") == "url_ratio.max_url_char_ratio (or enabled: false)"


def test_an_installed_plugin_left_off_changes_no_fingerprint(plugin):
    spec = FilterSpec.standard()
    assert spec.url_ratio is None
    assert "url_ratio" not in spec.stage_config()


def test_its_settings_and_version_enter_the_stage_config(plugin):
    on = FilterSpec(url_ratio=plugin.spec_type()).stage_config()
    assert on["url_ratio"] == {"settings": {"max_url_char_ratio": 0.2}, "version": "0.1.0"}
    other = FilterSpec(url_ratio=plugin.spec_type(max_url_char_ratio=0.5)).stage_config()
    assert other != on
    with pytest.raises(ValueError, match="max_url_char_ratio"):
        plugin.spec_type(max_url_char_ratio=2.0)


def test_the_chain_runs_it(plugin):
    import pyarrow as pa

    text = "see https://example.com/a-very-long-link-to-somewhere-else now"
    table = pa.table(
        {
            "doc_id": ["a", "b"],
            "source_file": ["f", "f"],
            "source_line": [1, 2],
            "text": [text, "no link at all here"],
            "n_tokens": [20, 20],
        }
    )
    result = filter_table(table, FilterSpec(url_ratio=plugin.spec_type()))
    assert result.kept["doc_id"].to_pylist() == ["b"]
    assert result.rejects["reason"].to_pylist() == ["url_ratio"]


@pytest.mark.slow
def test_dagster_job_execute_with_the_example_run_yaml(plugin, plugin_dir: Path, tmp_path: Path):
    shutil.copytree(EXAMPLE / "data", tmp_path / "examples" / "plugin_filter" / "data")
    home = tmp_path / "dagster_home"
    home.mkdir()
    command = [sys.executable, "-m", "dagster", "job", "execute", "-m", "llm_assets.definitions"]
    done = subprocess.run(
        [*command, "-j", PIPELINE_JOB, "-c", str(EXAMPLE / "run.yaml")],
        cwd=tmp_path,
        env={
            **os.environ,
            "DAGSTER_HOME": str(home),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")])
            ),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    catalog = Catalog(tmp_path / DEFAULT_WAREHOUSE_DIR / CATALOG_FILE)
    rejects = catalog.query(
        "SELECT value FROM filtered_documents_rejects WHERE reason = 'url_ratio' ORDER BY 1"
    )
    assert len(rejects) == 6
    assert all(float(value) > 0.2 for (value,) in rejects)
