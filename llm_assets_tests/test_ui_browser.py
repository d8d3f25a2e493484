"""The pipeline as a person runs it in the Dagster UI, end to end in a real browser.

``dagster-webserver`` serves the code location from a temporary working directory: the assets'
relative defaults (input ``data/sample``, warehouse ``data/warehouse``) resolve there, so the run
reads a private copy of the shipped sample and writes a private warehouse; ``DAGSTER_HOME`` is a
temporary instance too. Debian's chromium (never a downloaded browser) opens the asset group,
clicks *Materialize all*, waits for the run to succeed, then checks that every asset's page shows
the row count that the materialization event and the DuckDB catalog hold, that its metadata opens
with the rendered summary, and that its charts render. Screenshots of each asset's metadata and
charts (and the batches' decoded rows) go to ``$LLM_ASSETS_SCREENSHOTS`` or the test's temporary
folder, printed; the asset graph's also to ``benchmarks/results/ui_screenshot.png``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from playwright.sync_api import Locator, Page, expect, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from llm_assets.constants import (
    CATALOG_FILE,
    DEFAULT_INPUT_DIR,
    DEFAULT_WAREHOUSE_DIR,
    FILTERED_DOCUMENTS,
    GROUP_NAME,
    NORMALIZED_DOCUMENTS,
    PIPELINE_ASSETS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.warehouse.catalog import Catalog
from llm_assets_tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT_COPY = REPO / "benchmarks" / "results" / "ui_screenshot.png"
SERVER_START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 300
UI_TIMEOUT_MS = 30_000
VIEWPORT = {"width": 1600, "height": 1000}
ASSET_VIEWPORT = {"width": 1920, "height": 1300}
"""The asset pages on a full HD screen, taller so that a dialog's screenshot holds its charts.
(Dagster's metadata table is as wide as its widest unbreakable value, the output folder's
absolute path: on a narrower screen its right side is cut.)"""
SCREENSHOTS_ENV = "LLM_ASSETS_SCREENSHOTS"

# A minimal instance: runs launch at once (the default queued coordinator needs a daemon, which
# this test does not start) and nothing is reported anywhere.
DAGSTER_YAML = """\
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
"""

_LOCATIONS_QUERY = """{ workspaceOrError { __typename
  ... on Workspace { locationEntries { name locationOrLoadError { __typename
    ... on PythonError { message }
    ... on RepositoryLocation { repositories { name } } } } }
  ... on PythonError { message } } }"""


@dataclass
class Webserver:
    """A running ``dagster-webserver`` and the temporary folders it works in."""

    url: str
    home: Path
    workdir: Path
    log: Path
    process: subprocess.Popen

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the server's combined stdout and stderr."""
        text = self.log.read_text(errors="replace") if self.log.exists() else "(no log)"
        return text[-chars:]

    def graphql(self, query: str) -> dict:
        """The ``data`` of one GraphQL query against the server."""
        request = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.load(response)
        assert "errors" not in payload, payload
        return payload["data"]


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_serving(server: Webserver) -> None:
    """Poll ``/server_info`` until it answers; fail with the server's log otherwise."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(
                f"dagster-webserver exited with {server.process.returncode} before serving:\n"
                + server.log_tail()
            )
        try:
            with urllib.request.urlopen(f"{server.url}/server_info", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(
        f"dagster-webserver did not answer /server_info within {SERVER_START_TIMEOUT_S} s:\n"
        + server.log_tail()
    )


def _stop(process: subprocess.Popen) -> None:
    """End the server's whole process group (code server and run workers included): SIGTERM,
    then SIGKILL for whatever is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=15)


@pytest.fixture
def webserver(tmp_path: Path, sample_input: Path) -> Iterator[Webserver]:
    """``dagster-webserver`` on a free local port, with a temporary instance and working
    directory holding a copy of the shipped sample where the input default points."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    # The instance remembers that the welcome dialog was seen: it would cover the page otherwise.
    (home / ".nux").mkdir()
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")

    # A short working directory, as a user's project folder is: the metadata shows its paths.
    workdir = Path(tempfile.mkdtemp(prefix="llm-assets-ui-"))
    input_dir = workdir / DEFAULT_INPUT_DIR
    shutil.copytree(sample_input, input_dir)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LLM_ASSETS_DATA_ROOT": str(workdir / "data"),
        "LLM_ASSETS_INPUT_DIR": str(input_dir),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    }
    port = _free_port()
    executable = Path(sys.executable).with_name("dagster-webserver")
    log = tmp_path / "webserver.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [str(executable), "-h", "127.0.0.1", "-p", str(port), "-m", "llm_assets.definitions"],
            cwd=workdir,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Webserver(f"http://127.0.0.1:{port}", home, workdir, log, process)
    try:
        _wait_until_serving(server)
        yield server
    finally:
        _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


def _group_path(server: Webserver) -> str:
    """The UI path of the pipeline's asset group; fails with the load error when the code
    location did not load."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while True:
        workspace = server.graphql(_LOCATIONS_QUERY)["workspaceOrError"]
        assert workspace["__typename"] == "Workspace", workspace
        entries = workspace["locationEntries"]
        assert len(entries) == 1, entries
        location = entries[0]["locationOrLoadError"]
        if location is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # still loading
    assert location and location["__typename"] == "RepositoryLocation", (
        f"code location {entries[0]['name']} did not load: {location}\n" + server.log_tail()
    )
    repository = location["repositories"][0]["name"]
    return f"/locations/{repository}@{entries[0]['name']}/asset-groups/{GROUP_NAME}"


def _launch_from_the_page(page: Page) -> str:
    """Click *Materialize all*, confirm a launch dialog if one opens, and return the run's path
    from the "Launched run" toast."""
    page.get_by_role("button", name="Materialize all").click()
    toast_link = page.get_by_role("link", name="View", exact=True)
    dialog = page.get_by_role("dialog")
    deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        if toast_link.count():
            href = toast_link.first.get_attribute("href") or ""
            assert re.fullmatch(r"/runs/[0-9a-f-]{36}", href), href
            return href
        if dialog.count() and dialog.first.is_visible():
            dialog.first.get_by_role(
                "button", name=re.compile(r"^(Launch run|Materialize|Confirm)")
            ).first.click()
        page.wait_for_timeout(250)
    raise AssertionError("no 'Launched run' toast after clicking Materialize all")


def _wait_for_run_status(page: Page, url: str) -> str:
    """The run's final status as the run page shows it (reloaded now and then, in case the live
    update stalls)."""
    status = page.get_by_text(re.compile(r"^(Success|Failure|Canceled)$"))
    deadline = time.monotonic() + RUN_TIMEOUT_S
    page.goto(url)
    while time.monotonic() < deadline:
        try:
            status.first.wait_for(timeout=20_000)
            return status.first.inner_text().strip()
        except PlaywrightTimeout:
            page.reload()
    raise AssertionError(f"the run at {url} did not finish within {RUN_TIMEOUT_S} s")


def _expected_rows(server: Webserver, run_id: str) -> dict[str, int]:
    """Rows out per asset: the latest materialization event's metadata (which must come from
    this run) checked against the sum over the DuckDB catalog's current shards."""
    expected = {}
    with dg.DagsterInstance.from_config(str(server.home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS, run
        for asset in PIPELINE_ASSETS:
            event = instance.get_latest_materialization_event(dg.AssetKey(asset))
            assert event is not None and event.run_id == run_id, asset
            metadata = event.asset_materialization.metadata
            expected[asset] = metadata["rows_out"].value
            assert metadata["dagster/row_count"].value == expected[asset], asset
            folder = Path(metadata["folder"].value)
            assert folder.is_relative_to(server.workdir / DEFAULT_WAREHOUSE_DIR), folder
    catalog = Catalog(server.workdir / DEFAULT_WAREHOUSE_DIR / CATALOG_FILE)
    for asset in PIPELINE_ASSETS:
        in_catalog = sum(shard.rows_out for shard in catalog.current_shards(asset))
        assert in_catalog == expected[asset], (asset, in_catalog, expected[asset])
        assert expected[asset] > 0, asset
    return expected


SUMMARY_HEADLINES = {
    RAW_DOCUMENTS: "documents read from",
    NORMALIZED_DOCUMENTS: "documents normalized",
    TOKENIZED_DOCUMENTS: "documents, ",
    FILTERED_DOCUMENTS: "of",  # 1,421 of 3,634 documents kept
    TRAINING_BATCHES: "sequences of",
}
"""Words of each asset's summary headline, after its rows out (thousands separated)."""
CHARTS = {
    RAW_DOCUMENTS: 1,  # reject reasons (the sample plants bad records)
    NORMALIZED_DOCUMENTS: 1,  # reject reasons
    TOKENIZED_DOCUMENTS: 1,  # document lengths
    FILTERED_DOCUMENTS: 2,  # document lengths kept and given, reject reasons
    TRAINING_BATCHES: 2,  # document lengths against seq_len, padding and truncation
}
"""The fewest charts each asset's ``charts`` entry shows."""


def screenshot_folder(tmp_path: Path) -> Path:
    """Where the screenshots go: ``$LLM_ASSETS_SCREENSHOTS`` when set, else the test's tmp."""
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path / "screenshots").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _metadata_value(page: Page, key: str) -> Locator:
    """The value cell of metadata entry ``key`` in the asset page's metadata table."""
    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=key, exact=True))
    expect(row).to_have_count(1, timeout=UI_TIMEOUT_MS)
    return row.get_by_role("cell").last


def _open_markdown(page: Page, key: str) -> Locator:
    """Open the dialog of a Markdown entry too long to show inline; the dialog."""
    _metadata_value(page, key).get_by_text("[Show Markdown]").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible(timeout=UI_TIMEOUT_MS)
    return dialog


def _rendered_images(page: Page, scope: Locator, at_least: int) -> int:
    """Wait until ``scope`` holds ``at_least`` images, every one decoded (natural width > 0);
    their number."""
    images = scope.locator("img")
    expect(images.nth(at_least - 1)).to_be_attached(timeout=UI_TIMEOUT_MS)
    page.wait_for_function(
        "imgs => imgs.every(i => i.complete && i.naturalWidth > 0)",
        arg=images.element_handles(),
        timeout=UI_TIMEOUT_MS,
    )
    return images.count()


def _check_asset_page(page: Page, server: Webserver, asset: str, rows: int, shots: Path) -> None:
    """The asset's page shows ``rows`` in its status grid ("Row count", thousands separated)
    and as the ``rows_out`` entry of its metadata table; the metadata opens with the summary,
    rendered Markdown whose headline gives the rows thousands separated; its charts render
    (images decoded, natural width > 0). Screenshots of the metadata and of the charts."""
    start = time.monotonic()
    page.goto(f"{server.url}/assets/{asset}")
    # The page is this asset's: its output folder is the asset's folder in the warehouse.
    expect(_metadata_value(page, "folder")).to_contain_text(
        f"/{DEFAULT_WAREHOUSE_DIR}/{asset}/", timeout=UI_TIMEOUT_MS
    )
    expect(_metadata_value(page, "rows_out")).to_have_text(str(rows), timeout=UI_TIMEOUT_MS)
    row_count = page.get_by_text("Row count", exact=True).locator("xpath=..")
    expect(row_count).to_contain_text(f"{rows:,}", timeout=UI_TIMEOUT_MS)

    table = page.get_by_role("table").filter(
        has=page.get_by_role("cell", name="summary", exact=True)
    )
    first_key = table.get_by_role("row").nth(1).get_by_role("cell").first
    expect(first_key).to_have_text("summary", timeout=UI_TIMEOUT_MS)
    summary = _metadata_value(page, "summary")
    expect(summary).to_contain_text(f"{rows:,} {SUMMARY_HEADLINES[asset]}")
    expect(summary.locator("li").first).to_be_visible()  # Markdown rendered, not shown as text
    page.get_by_text("Metadata", exact=True).scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{asset}_metadata.png"))

    dialog = _open_markdown(page, "charts")
    drawn = _rendered_images(page, dialog, CHARTS[asset])
    page.screenshot(path=str(shots / f"{asset}_charts.png"))
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden(timeout=UI_TIMEOUT_MS)
    print(f"{asset}: summary and {drawn} chart(s) rendered ({time.monotonic() - start:.1f} s)")
    if asset == TRAINING_BATCHES:
        rows_cell = _metadata_value(page, "decoded_rows")
        long = rows_cell.get_by_text("[Show Markdown]").count() > 0  # else shown inline
        shown = _open_markdown(page, "decoded_rows") if long else rows_cell
        expect(shown).to_contain_text("train-00000, row 1")
        page.screenshot(path=str(shots / f"{asset}_decoded_rows.png"))
        if long:
            page.keyboard.press("Escape")


def _failure_screenshot(page: Page, path: Path) -> None:
    """Keep what the page showed when the test failed (without hiding the failure itself)."""
    try:
        page.screenshot(path=str(path))
        SCREENSHOT_COPY.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SCREENSHOT_COPY.with_name("ui_screenshot_failure.png"))
        print(f"screenshot of the page at failure: {path}")
    except Exception as exc:  # the browser may be gone: the original error matters more
        print(f"no failure screenshot: {exc}")


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"needs Debian's chromium at {CHROMIUM}")
def test_materialize_all_in_the_ui_and_every_asset_page_shows_its_row_count(
    webserver: Webserver, tmp_path: Path
):
    """Materialize all from the asset group page in chromium; the run succeeds and each of the
    five assets' pages shows the rows out that Dagster and the catalog recorded."""
    group_url = webserver.url + _group_path(webserver)
    wait = UI_TIMEOUT_MS
    shots = screenshot_folder(tmp_path)
    print(f"screenshots: {shots}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(UI_TIMEOUT_MS)
        try:
            page.goto(group_url)
            for asset in PIPELINE_ASSETS:
                expect(page.get_by_text(asset, exact=True).first).to_be_visible(timeout=wait)
            run_path = _launch_from_the_page(page)
            print(f"run launched: {run_path}")
            status = _wait_for_run_status(page, webserver.url + run_path)
            run_id = run_path.rsplit("/", 1)[1]
            assert status == "Success", f"run {run_id} ended with {status}:\n" + (
                webserver.log_tail()
            )
            expected = _expected_rows(webserver, run_id)
            print(f"run {run_id} succeeded")

            page.set_viewport_size(ASSET_VIEWPORT)
            for asset, rows in expected.items():
                _check_asset_page(page, webserver, asset, rows, shots)
            page.set_viewport_size(VIEWPORT)

            # The graph after the run: every node materialized, its rows_reconcile check passed.
            page.goto(group_url)
            n = len(PIPELINE_ASSETS)
            expect(page.get_by_text("Materialized", exact=True)).to_have_count(n, timeout=wait)
            expect(page.get_by_text("1 / 1 Passed", exact=True)).to_have_count(n, timeout=wait)
            graph = shots / "asset_graph.png"
            page.screenshot(path=str(graph))
            SCREENSHOT_COPY.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(graph, SCREENSHOT_COPY)
        except BaseException:
            _failure_screenshot(page, shots / "failure.png")
            print(f"dagster-webserver log (end):\n{webserver.log_tail()}")
            raise
        finally:
            browser.close()
