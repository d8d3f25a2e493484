"""The input folder sensor: new, changed or deleted input files start a run.

:func:`build_input_folder_sensor` watches the input folder, or an object-storage prefix
(``s3://bucket/prefix``: keys, sizes, modification times and ETags); a new, changed (path, size,
mtime) or deleted file starts one ``llm_pipeline`` run that computes only the new shards (the
stages reuse every shard whose input fingerprint is unchanged), once the changed files have not
been modified for :data:`SETTLE_SECONDS`. The run key is the number of runs so far plus the
change's fingerprint, so the same change never starts two runs and a folder that returns to an
earlier state starts one; the cursor (files -> fingerprint, runs so far; JSON) lives in Dagster's
storage and survives restarts of the daemon. A change counts as done only once a run that
covered it succeeds: when the sensor's last run failed or was canceled (or every re-execution of
it did), its changes are requested again, :data:`RETRY_AFTER_SECONDS` after the failure, doubling
with each failure of the same change, and at once when another file changes.

Off by default: turn it on in the UI (*Automation*) or with
``dagster sensor start input_folder_sensor``.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import dagster as dg

from llm_assets.constants import PIPELINE_JOB
from llm_assets.orchestration.run_config import (
    automation_run_config,
    pipeline_run_config,
    watched_folder,
)
from llm_assets.stages.engine import StageInputError
from llm_assets.stages.raw_documents import input_files
from llm_assets.storage import is_remote

SENSOR_INTERVAL_SECONDS = 30
RETRY_AFTER_SECONDS = 300.0
"""A change whose run failed is requested again this long after the failure (then twice as long
after each further failure of the same change, at most :data:`MAX_RETRY_AFTER_SECONDS`): a
failure that a fix of the set-up cures (a ``dagster dev`` started from the wrong folder, a full
disk) is retried without flooding the instance with runs that fail the same way."""
MAX_RETRY_AFTER_SECONDS = 6 * 3600.0
SETTLE_SECONDS = 15.0
"""A new or changed file starts a run only once it has not been modified for this long: a file
still being copied in would otherwise be read half-written (and its cut-off end recorded as
rejects), then read again when complete."""
RUN_KEY_TAG = "dagster/run_key"
SENSOR_NAME_TAG = "dagster/sensor_name"
"""Tags Dagster puts on a sensor's runs (and a re-execution keeps)."""


def snapshot(input_dir: str | Path) -> dict[str, str]:
    """Relative path -> ``size:mtime_ns`` of every input file (what the sensor compares); of an
    object in object storage, ``size:mtime_ns:ETag`` (an object rewritten within the store's
    one-second clock keeps its time but gets a new ETag)."""
    files = {}
    for file in input_files(input_dir):
        if is_remote(file.location):
            mtime_ns = round((file.mtime_s or 0.0) * 1e9)
            files[file.name] = f"{file.size}:{mtime_ns}:{file.version}"
        else:
            files[file.name] = f"{file.size}:{file.version}"
    return files


def changed_files(before: dict[str, str], now: dict[str, str]) -> dict[str, str]:
    """Files that are new or whose size or mtime changed since ``before``."""
    return {name: fp for name, fp in now.items() if before.get(name) != fp}


def deleted_files(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """Files in ``before`` that are gone (their rows leave the warehouse's current output only
    when a run lists the folder again)."""
    return sorted(set(before) - set(now))


def _unsettled(changed: dict[str, str], now_s: float, settle_seconds: float) -> list[str]:
    """Changed files modified less than ``settle_seconds`` ago."""
    return sorted(
        name for name, fp in changed.items() if now_s - int(fp.split(":")[1]) / 1e9 < settle_seconds
    )


def _read_cursor(cursor: str | None) -> dict[str, Any]:
    """The sensor's state: ``files`` (the folder as of the last run requested, or as of the
    last change known to be done), ``runs`` (runs requested so far), ``pending`` (the last
    request while its run is not known to have succeeded: its key, the change's digest and the
    ``base`` folder state its changes are relative to) and ``failed`` (the change whose run
    failed: digest, run id and status, failures, when the last one ended). Cursors of earlier
    formats (the files alone, or files and runs) read as no pending run, ``legacy`` True: the
    sensor then looks up their last request (:func:`_legacy_request`)."""
    state: dict[str, Any] = json.loads(cursor) if cursor else {}
    if not isinstance(state.get("files"), dict):
        state = {"files": state}
    return {
        "files": state["files"],
        "runs": int(state.get("runs", 0)),
        "pending": state.get("pending"),
        "failed": state.get("failed"),
        "legacy": bool(cursor) and "pending" not in state,
    }


def _legacy_request(
    instance: dg.DagsterInstance, sensor_name: str, runs: int
) -> dict[str, Any] | None:
    """The last request of a sensor whose cursor is of a release before failed runs were
    retried (files and runs only, moved on at each request): its run key is ``{runs}-{digest}``.
    Returned as pending, relative to an empty folder (``base``), so that if its run failed the
    whole folder is requested again after the retry delay (finished shards are reused) rather
    than a run that failed under the old release never being retried. None when no such run is
    found."""
    if runs < 1:
        return None
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={SENSOR_NAME_TAG: sensor_name}), limit=50
    )
    for record in records:  # newest first
        key = record.dagster_run.tags.get(RUN_KEY_TAG, "")
        if key.startswith(f"{runs}-"):
            return {"key": key, "digest": key.split("-", 1)[1], "base": {}}
    return None


def _sensor_run_outcome(
    instance: dg.DagsterInstance, sensor_name: str, run_key: str
) -> tuple[str, dg.RunRecord | None]:
    """What became of the runs started for ``run_key`` (the sensor's own run and any
    re-execution of it, which keeps its tags): ``"succeeded"`` if one did, ``"failed"`` if all
    ended otherwise (failed or canceled; the newest record is returned), else ``"unknown"`` (not
    created yet, or still queued or running)."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: sensor_name})
    )
    if any(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records):
        return "succeeded", None
    if records and all(r.dagster_run.is_finished for r in records):
        return "failed", records[0]
    return "unknown", None


def _retry_delay(failures: int) -> float:
    return min(RETRY_AFTER_SECONDS * 2 ** max(failures - 1, 0), MAX_RETRY_AFTER_SECONDS)


def _change_digest(changed: dict[str, str], deleted: list[str]) -> str:
    return hashlib.sha256(json.dumps([sorted(changed.items()), deleted]).encode()).hexdigest()[:24]


def _settle_last_request(
    context: dg.SensorEvaluationContext, name: str, state: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any] | None, dict[str, Any] | None]:
    """What became of the sensor's last request, as the folder state its next changes are
    relative to (``before``), the request still pending and the change whose run failed: a
    succeeded run settles its change; a failed one makes its changes changes again."""
    pending, failed = state["pending"], state["failed"]
    before = state["files"]
    if pending:
        outcome, record = _sensor_run_outcome(context.instance, name, pending["key"])
        if outcome == "succeeded":
            pending = failed = None
        elif outcome == "failed" and record is not None:
            # The run did not process its changes: they are changes again, relative to the
            # folder as it was before them.
            same_change = bool(failed) and failed["digest"] == pending["digest"]
            failures = failed["failures"] + 1 if same_change else 1
            ended = record.end_time or time.time()
            keys = failed.get("keys", []) if same_change else []
            failed = {
                # every request of this change so far (a re-execution of any of them that
                # succeeds settles it), at most the last 10
                "keys": [*keys, pending["key"]][-10:],
                "target": state["files"],
                "digest": pending["digest"],
                "run_id": record.dagster_run.run_id,
                "status": record.dagster_run.status.value,
                "failures": failures,
                "ended_at": ended,
            }
            before = pending["base"]
            context.log.warning(
                f"run {record.dagster_run.run_id} ({record.dagster_run.status.value}) did "
                f"not process its changes; they are requested again after "
                f"{_retry_delay(failures):g} s, or at once when another file changes"
            )
            pending = None
    if failed and any(
        _sensor_run_outcome(context.instance, name, key)[0] == "succeeded"
        for key in failed.get("keys", [])
        if key != (pending or {}).get("key")
    ):
        # A failed request re-executed from the UI since the sensor saw the failure (a
        # re-execution keeps the run key) succeeded: its changes are done.
        if not pending:
            before = failed["target"]
        failed = None
    return before, pending, failed


def _next_request(
    context: dg.SensorEvaluationContext,
    state: dict[str, Any],
    cursor_now: dict[str, Any],
    folder: str,
    now: dict[str, str],
    *,
    settle_seconds: float,
    run_config: dict | None,
) -> dg.SensorResult | dg.SkipReason:
    """The run request for the files changed since ``cursor_now``'s, or why there is none:
    nothing changed, files still settling, or the same change failed and waits to retry."""
    before, pending, failed = cursor_now["files"], cursor_now["pending"], cursor_now["failed"]

    def skip(message: str) -> dg.SensorResult | dg.SkipReason:
        if cursor_now == state:
            return dg.SkipReason(message)
        return dg.SensorResult(skip_reason=message, cursor=json.dumps(cursor_now, sort_keys=True))

    changed = changed_files(before, now)
    deleted = deleted_files(before, now)
    if not changed and not deleted:
        return skip(f"no new, changed or deleted files in {folder} ({len(now)} known)")
    unsettled = _unsettled(changed, time.time(), settle_seconds)
    if unsettled:
        return skip(
            f"waiting for {len(unsettled)} file(s) modified in the last "
            f"{settle_seconds:g} s to settle: {unsettled[:5]}"
        )
    digest = _change_digest(changed, deleted)
    retry_at = failed["ended_at"] + _retry_delay(failed["failures"]) if failed else 0.0
    if failed and failed["digest"] == digest and time.time() < retry_at:
        return skip(
            f"run {failed['run_id']} for these {len(changed)} new or changed "
            f"and {len(deleted)} deleted file(s) ended {failed['status']} "
            f"({failed['failures']} time(s)); requesting them again at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(retry_at))}, "
            "or at once when a file changes (or re-execute that run)"
        )
    if failed and failed["digest"] != digest:
        failed = None
    runs = state["runs"]
    # The number of runs so far is part of the key: the same change seen twice (the same
    # cursor) never starts two runs, but a folder that comes back to an earlier state (a
    # file restored from a backup, same size and mtime) is a new change that starts one.
    key = f"{runs + 1}-{digest}"
    context.log.info(
        f"{len(changed)} new or changed file(s): {sorted(changed)[:10]}; "
        f"{len(deleted)} deleted: {deleted[:10]}"
    )
    # Every run reads the whole folder, so a run that succeeds covers the changes of any
    # earlier request still pending: its base is the oldest unconfirmed state.
    base = pending["base"] if pending else before
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=key,
                run_config=pipeline_run_config(folder, run_config),
                tags={
                    "llm_assets/changed_files": str(len(changed)),
                    "llm_assets/deleted_files": str(len(deleted)),
                },
            )
        ],
        cursor=json.dumps(
            {
                "files": now,
                "runs": runs + 1,
                "pending": {"key": key, "digest": digest, "base": base},
                "failed": failed,
            },
            sort_keys=True,
        ),
    )


def build_input_folder_sensor(
    input_dir: str | None = None,
    *,
    name: str = "input_folder_sensor",
    run_config: dict | None = None,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
    settle_seconds: float = SETTLE_SECONDS,
) -> dg.SensorDefinition:
    """A sensor that starts ``llm_pipeline`` on new, changed or deleted files under ``input_dir``
    (default: :func:`watched_folder`). ``run_config`` is merged into each run's config at every
    depth (e.g. a warehouse root, or more ``raw_documents`` settings). Changed files start a run
    once none has been modified for ``settle_seconds``."""

    @dg.sensor(
        name=name,
        job_name=PIPELINE_JOB,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        default_status=default_status,
        description="New, changed or deleted input files start a run that computes only what "
        "is new",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        automation_run_config()  # a bad file fails the tick, even with nothing to run
        folder = watched_folder(input_dir)
        try:
            now = snapshot(folder)
        except StageInputError as err:
            return dg.SkipReason(f"input folder not usable: {err}")
        state = _read_cursor(context.cursor)
        if state.pop("legacy"):
            state["pending"] = _legacy_request(context.instance, name, state["runs"])
        before, pending, failed = _settle_last_request(context, name, state)
        cursor_now = {"files": before, "runs": state["runs"], "pending": pending, "failed": failed}
        return _next_request(
            context,
            state,
            cursor_now,
            folder,
            now,
            settle_seconds=settle_seconds,
            run_config=run_config,
        )

    return _sensor


input_folder_sensor = build_input_folder_sensor()
