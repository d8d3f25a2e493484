"""Every input and output path must resolve inside the data root: ``..`` and symlinks out are
refused with a message naming the path and the root."""

from __future__ import annotations

import dagster as dg
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.paths import DATA_ROOT_ENV, PathEscapeError, inside, resolve_data_root
from llm_assets.stages import StageInputError, list_input_files
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import _failure_message
from llm_assets_tests.conftest import pipeline_run_config


def test_inside_accepts_the_root_and_below_and_refuses_dotdot(tmp_path):
    root = tmp_path / "data"
    (root / "in").mkdir(parents=True)
    assert inside(root, root.resolve(), "x") == root.resolve()
    assert inside(root / "in", root.resolve(), "x") == (root / "in").resolve()
    with pytest.raises(PathEscapeError, match=r"input_dir '.*in/\.\./\.\.' resolves to .* outside"):
        inside(root / "in" / ".." / "..", root.resolve(), "input_dir")


def test_data_root_order_config_then_env_then_warehouse_parent(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    warehouse = tmp_path / "data" / "warehouse"
    assert resolve_data_root("", warehouse) == (tmp_path / "data").resolve()
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "env"))
    assert resolve_data_root("", warehouse) == (tmp_path / "env").resolve()
    assert resolve_data_root(str(tmp_path / "cfg"), warehouse) == (tmp_path / "cfg").resolve()


def test_warehouse_outside_an_explicit_data_root_is_refused(tmp_path):
    resource = WarehouseResource(root=str(tmp_path / "elsewhere"), data_root=str(tmp_path / "d"))
    with pytest.raises(PathEscapeError, match="warehouse root"):
        _ = resource.data_root_path


def test_symlinked_file_or_folder_pointing_out_is_refused(tmp_path):
    root = tmp_path / "data"
    (root / "in").mkdir(parents=True)
    (root / "in" / "ok.jsonl").write_text('{"text": "fine"}\n')
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"text": "not yours"}\n')
    assert len(list_input_files(root / "in", root.resolve())) == 1
    (root / "in" / "leak.jsonl").symlink_to(secret)
    with pytest.raises(StageInputError, match=r"input file .*leak\.jsonl.* outside the data root"):
        list_input_files(root / "in", root.resolve())
    (root / "in" / "leak.jsonl").unlink()
    (root / "linked").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(StageInputError, match=r"input folder .* outside the data root"):
        list_input_files(root / "linked", root.resolve())
    # A symlink that stays inside the root is fine.
    (root / "in" / "alias.jsonl").symlink_to(root / "in" / "ok.jsonl")
    assert len(list_input_files(root / "in", root.resolve())) == 2


def test_a_run_with_an_input_folder_outside_the_root_fails_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ROOT_ENV)  # the default root: the folder holding the warehouse
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.jsonl").write_text('{"text": "hello there"}\n')
    data = tmp_path / "data"
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(data / "warehouse")),
        },
        run_config=pipeline_run_config(data / ".." / "outside"),
        raise_on_error=False,
    )
    assert not result.success
    message = _failure_message(result)
    assert "outside the data root" in message and str(data.resolve()) in message
    assert not (data / "warehouse" / "raw_documents").exists()
