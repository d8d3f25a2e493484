"""The input folder sensor: a new file starts exactly one run that computes only what is new,
an unchanged folder is skipped, a failed change is requested again."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.orchestration import sensors
from llm_assets.orchestration.sensors import (
    RUN_KEY_TAG,
    SENSOR_NAME_TAG,
    build_input_folder_sensor,
    changed_files,
)
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import SAMPLE_DIR


def _run(
    request: dg.RunRequest,
    root,
    instance: dg.DagsterInstance | None = None,
    sensor: dg.SensorDefinition | None = None,
) -> dg.ExecuteInProcessResult:
    """Execute a sensor's run request the way the daemon would, with its run config (and, given
    the sensor, the tags the daemon adds: its name and the run key)."""
    config = dict(request.run_config)
    config.setdefault("ops", {}).setdefault("training_batches", {"config": {"seq_len": 256}})
    tags = dict(request.tags)
    if sensor is not None:
        tags |= {RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor.name}
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config=config,
        instance=instance or dg.DagsterInstance.ephemeral(),
        tags=tags,
        raise_on_error=False,
    )


def _aged(*paths: Path, seconds: float = 60.0) -> None:
    """Set the files' mtime ``seconds`` in the past: settled, as a file copied in a while ago."""
    then = time.time() - seconds
    for path in paths:
        os.utime(path, (then, then))


def _computed(result) -> dict[str, int]:
    return {
        e.asset_key.to_user_string(): e.materialization.metadata["shards_computed"].value
        for e in result.get_asset_materialization_events()
    }


def test_sensor_runs_once_per_change_and_only_new_shards_are_computed(tmp_path):
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    _aged(Path(shutil.copy(SAMPLE_DIR / "wiki_sample.jsonl", input_dir)))
    root = tmp_path / "warehouse"
    sensor = build_input_folder_sensor(str(input_dir))
    instance = dg.DagsterInstance.ephemeral()

    first = sensor(dg.build_sensor_context(instance=instance, cursor=None))
    assert len(first.run_requests) == 1
    request = first.run_requests[0]
    assert request.run_config["ops"]["raw_documents"]["config"]["input_dir"] == str(input_dir)
    assert _run(request, root).success

    # Same folder again: a skip with a reason, and the cursor survives as plain JSON.
    again = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert isinstance(again, dg.SkipReason) and "no new, changed or deleted" in again.skip_message
    assert json.loads(first.cursor)["runs"] == 1
    assert list(json.loads(first.cursor)["files"]) == ["wiki_sample.jsonl"]

    _aged(Path(shutil.copy(SAMPLE_DIR / "reviews.csv", input_dir)))
    second = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    (request2,) = second.run_requests
    assert request2.run_key != request.run_key
    # The same change seen twice gives the same run key: Dagster starts it once.
    repeat = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert repeat.run_requests[0].run_key == request2.run_key
    result = _run(request2, root)
    assert result.success
    computed = _computed(result)
    assert computed["raw_documents"] == 1  # only reviews.csv; wiki_sample's shard reused
    assert computed["normalized_documents"] == 1 and computed["tokenized_documents"] == 1


def _evaluate(sensor: dg.SensorDefinition, cursor: str | None):
    return sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), cursor=cursor))


def _watched_sample(tmp_path: Path):
    """A folder holding the sample (settled), an instance, the sensor watching the folder, and
    a function evaluating the sensor on that instance from a cursor."""
    folder = tmp_path / "in"
    folder.mkdir()
    _aged(Path(shutil.copy(SAMPLE_DIR / "wiki_sample.jsonl", folder)))
    instance = dg.DagsterInstance.ephemeral()
    sensor = build_input_folder_sensor(str(folder))

    def evaluate(cursor):
        return sensor(dg.build_sensor_context(instance=instance, cursor=cursor))

    return folder, instance, sensor, evaluate


def test_a_change_whose_run_failed_is_requested_again(tmp_path, monkeypatch):
    """The changes of a failed run are not forgotten (the cursor does not move on when the run
    is requested, or a file whose run failed would not be read until it changed again): the
    sensor says which run failed and when it tries again, requests the change again after the delay,
    and at once with any later change; a run that succeeds (or a successful re-execution of a
    failed one) settles everything it covered."""
    folder, instance, sensor, evaluate = _watched_sample(tmp_path)

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a warehouse root that is a file: every stage fails\n")
    first = evaluate(None)
    (request,) = first.run_requests
    assert not _run(request, not_a_folder, instance, sensor).success

    waiting = evaluate(first.cursor)
    assert isinstance(waiting, dg.SensorResult) and not waiting.run_requests
    message = waiting.skip_reason.skip_message
    assert "ended FAILURE (1 time(s))" in message and "requesting them again at" in message
    failed_run = instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: request.run_key}))[0]
    assert failed_run.run_id in message
    # Seen again before the delay: the same skip, the cursor unchanged.
    assert isinstance(evaluate(waiting.cursor), dg.SkipReason)

    # After the delay the same change is requested again, under a new key; it fails again.
    monkeypatch.setattr(sensors, "RETRY_AFTER_SECONDS", 0.0)
    retry = evaluate(waiting.cursor)
    (request2,) = retry.run_requests
    assert request2.run_key != request.run_key
    assert request2.run_key.split("-", 1)[1] == request.run_key.split("-", 1)[1]
    assert not _run(request2, not_a_folder, instance, sensor).success
    monkeypatch.setattr(sensors, "RETRY_AFTER_SECONDS", 300.0)
    again = evaluate(retry.cursor)
    assert "(2 time(s))" in again.skip_reason.skip_message
    retry_at = time.strptime(
        again.skip_reason.skip_message.split(" at ")[1][:19], "%Y-%m-%d %H:%M:%S"
    )
    assert time.mktime(retry_at) >= time.time() + 500  # 300 s doubled after a second failure

    # Another file arrives: one run for both changes at once, no waiting; it succeeds.
    _aged(Path(shutil.copy(SAMPLE_DIR / "reviews.csv", folder)))
    both = evaluate(again.cursor)
    (request3,) = both.run_requests
    assert request3.tags["llm_assets/changed_files"] == "2"
    assert _run(request3, tmp_path / "warehouse", instance, sensor).success
    settled = evaluate(both.cursor)
    assert isinstance(settled, dg.SensorResult) and not settled.run_requests
    assert "no new, changed or deleted" in settled.skip_reason.skip_message
    state = json.loads(settled.cursor)
    assert state["pending"] is None and state["failed"] is None
    assert isinstance(evaluate(settled.cursor), dg.SkipReason)


@pytest.mark.parametrize("outcome", ["failed", "succeeded"])
def test_a_cursor_of_an_earlier_release_keeps_its_failed_run(tmp_path, monkeypatch, outcome):
    """A cursor of a release before failed runs were retried (files and runs; it moved on at
    each request) whose last run failed: after the upgrade the folder is requested again once
    the retry delay is over, rather than "no new, changed or deleted files" with the failed
    change lost for good. Had that run succeeded, nothing is requested."""
    _, instance, sensor, evaluate = _watched_sample(tmp_path)
    first = evaluate(None)
    (request,) = first.run_requests
    root = tmp_path / "warehouse" if outcome == "succeeded" else tmp_path / "file"
    if outcome == "failed":
        root.write_text("a warehouse root that is a file: every stage fails\n")
    assert _run(request, root, instance, sensor).success == (outcome == "succeeded")
    state = json.loads(first.cursor)
    old_cursor = json.dumps({"files": state["files"], "runs": state["runs"]}, sort_keys=True)

    after = evaluate(old_cursor)
    assert not getattr(after, "run_requests", None)
    skip = after if isinstance(after, dg.SkipReason) else after.skip_reason
    if outcome == "succeeded":
        assert "no new, changed or deleted" in skip.skip_message
        return
    assert "ended FAILURE" in skip.skip_message
    monkeypatch.setattr(sensors, "RETRY_AFTER_SECONDS", 0.0)
    (retry,) = evaluate(after.cursor).run_requests
    assert retry.run_key.startswith("2-") and retry.tags["llm_assets/changed_files"] == str(
        len(state["files"])
    )
    assert _run(retry, tmp_path / "warehouse", instance, sensor).success


@pytest.mark.parametrize("seen", ["none", "tick", "retry"])
def test_a_successful_reexecution_settles_a_failed_change(tmp_path, monkeypatch, seen):
    """Re-executing a failed sensor run (it keeps the run key) and succeeding counts: the change
    is not requested again, whether the sensor saw the failure first or not (a tick that saw
    the failure, or a failed retry, does not make a later successful re-execution ignored)."""
    _, instance, sensor, evaluate = _watched_sample(tmp_path)

    first = evaluate(None)
    (request,) = first.run_requests
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x\n")
    assert not _run(request, not_a_folder, instance, sensor).success
    cursor = first.cursor
    if seen in ("tick", "retry"):  # a tick saw the failure
        saw = evaluate(cursor)
        assert "ended FAILURE" in saw.skip_reason.skip_message
        cursor = saw.cursor
    if seen == "retry":  # and the sensor's retry of the change failed too, and was seen
        monkeypatch.setattr(sensors, "RETRY_AFTER_SECONDS", 0.0)
        retry = evaluate(cursor)
        assert not _run(retry.run_requests[0], not_a_folder, instance, sensor).success
        monkeypatch.setattr(sensors, "RETRY_AFTER_SECONDS", 300.0)
        cursor = evaluate(retry.cursor).cursor
    # the first request re-executed: counted even after a tick saw the failure or a retry failed
    assert _run(request, tmp_path / "warehouse", instance, sensor).success
    monkeypatch.setattr(sensors, "RETRY_AFTER_SECONDS", 0.0)  # past any retry delay
    after = evaluate(cursor)
    assert not after.run_requests and "no new, changed" in after.skip_reason.skip_message
    state = json.loads(after.cursor)
    assert state["pending"] is None and state["failed"] is None
    assert isinstance(evaluate(after.cursor), dg.SkipReason)


def test_sensor_waits_for_a_file_to_settle_then_runs_once(tmp_path):
    """A file modified within the settle time (still being copied in) starts no run yet: a run
    would read it half-written, recording its cut-off end as rejects, and another run follow."""
    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.jsonl"
    path.write_text('{"text": "being written"}\n')
    sensor = build_input_folder_sensor(str(tmp_path / "in"), settle_seconds=30)
    waiting = _evaluate(sensor, None)
    assert isinstance(waiting, dg.SkipReason) and "waiting for 1 file(s)" in waiting.skip_message
    assert "a.jsonl" in waiting.skip_message
    _aged(path)
    assert len(_evaluate(sensor, None).run_requests) == 1


def test_sensor_runs_on_a_deleted_file_and_on_a_restored_one(tmp_path):
    """Deleting a file starts a run, so its rows leave the current output. A file restored
    from a backup (same size and mtime as an earlier state) starts a run with a new key: Dagster
    starts one run per key, so a repeated key would leave the restored file unread."""
    folder = tmp_path / "in"
    folder.mkdir()
    a, b = folder / "a.jsonl", folder / "b.jsonl"
    a.write_text('{"text": "original"}\n')
    b.write_text('{"text": "other"}\n')
    _aged(a, b, seconds=120)
    original = a.stat()
    sensor = build_input_folder_sensor(str(folder))
    first = _evaluate(sensor, None)
    a.write_text('{"text": "an edit"}\n')
    _aged(a)
    edited = _evaluate(sensor, first.cursor)
    a.write_text('{"text": "original"}\n')
    os.utime(a, ns=(original.st_atime_ns, original.st_mtime_ns))  # `cp -p` from a backup
    restored = _evaluate(sensor, edited.cursor)
    keys = [r.run_requests[0].run_key for r in (first, edited, restored)]
    assert len(set(keys)) == 3
    b.unlink()
    deleted = _evaluate(sensor, restored.cursor)
    (request,) = deleted.run_requests
    assert request.tags["llm_assets/deleted_files"] == "1"
    assert list(json.loads(deleted.cursor)["files"]) == ["a.jsonl"]
    assert isinstance(_evaluate(sensor, deleted.cursor), dg.SkipReason)


def test_extra_run_config_is_merged_at_every_depth(tmp_path):
    """Extra ``raw_documents`` settings keep the watched folder (a one-level merge would replace
    the op's config, and the run read ``data/sample`` instead)."""
    (tmp_path / "in").mkdir()
    _aged(Path(shutil.copy(SAMPLE_DIR / "wiki_sample.jsonl", tmp_path / "in")))
    extra = {"ops": {"raw_documents": {"config": {"text_field": "output"}}}}
    sensor = build_input_folder_sensor(str(tmp_path / "in"), run_config=extra)
    config = _evaluate(sensor, None).run_requests[0].run_config["ops"]["raw_documents"]["config"]
    assert config == {"input_dir": str(tmp_path / "in"), "text_field": "output"}


def test_sensor_skips_a_missing_folder_with_its_reason(tmp_path):
    sensor = build_input_folder_sensor(str(tmp_path / "nowhere"))
    skipped = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral()))
    assert isinstance(skipped, dg.SkipReason) and "nowhere" in skipped.skip_message


def test_changed_files_sees_new_and_modified_only():
    assert changed_files({"a": "1:1", "b": "2:2"}, {"a": "1:1", "b": "2:3", "c": "5:5"}) == {
        "b": "2:3",
        "c": "5:5",
    }


def test_sensor_watches_an_s3_prefix_by_keys_sizes_and_etags(s3, tmp_path):
    """Objects in a bucket: settling time on their write time, one run per change, a rewrite of
    the same size seen by its ETag, a deleted object a change too; a bucket that cannot be
    listed is a skip naming it."""
    for name in ("notes.txt", "reviews.csv"):
        s3.client.upload_file(str(SAMPLE_DIR / name), s3.bucket, f"in/{name}")
    url = s3.url("in")
    instance = dg.DagsterInstance.ephemeral()

    def evaluate(cursor, settle_seconds=0.0):
        sensor = build_input_folder_sensor(url, settle_seconds=settle_seconds)
        return sensor(dg.build_sensor_context(instance=instance, cursor=cursor))

    waiting = evaluate(None, settle_seconds=60.0)  # just written: not settled yet
    assert "waiting for 2 file(s)" in waiting.skip_message
    first = evaluate(None)
    (request,) = first.run_requests
    assert request.run_config["ops"]["raw_documents"]["config"]["input_dir"] == url
    assert sorted(json.loads(first.cursor)["files"]) == ["notes.txt", "reviews.csv"]
    assert _run(request, tmp_path / "warehouse", instance).success
    assert "no new, changed or deleted" in evaluate(first.cursor).skip_message

    notes = (SAMPLE_DIR / "notes.txt").read_bytes()
    s3.client.put_object(Bucket=s3.bucket, Key="in/notes.txt", Body=notes.replace(b"a", b"b"))
    changed = evaluate(first.cursor)
    (request2,) = changed.run_requests
    assert request2.run_key != request.run_key
    assert request2.tags["llm_assets/changed_files"] == "1"
    s3.client.delete_object(Bucket=s3.bucket, Key="in/reviews.csv")
    (deleted,) = evaluate(changed.cursor).run_requests
    assert deleted.tags["llm_assets/deleted_files"] == "1"

    gone = build_input_folder_sensor(f"s3://no-such-{s3.bucket}/in")
    skip = gone(dg.build_sensor_context(instance=instance, cursor=None))
    assert f"no-such-{s3.bucket}" in skip.skip_message and "no such bucket" in skip.skip_message
