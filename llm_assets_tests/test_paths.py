"""An input path named in run config is read where it is; a link found inside an input folder
must lead inside that folder or the data root, and the warehouse must lie inside the data root:
``..`` and symlinks out are refused with a message naming the path and the folders."""

from __future__ import annotations

import dagster as dg
import pytest

from llm_assets.assets.filter_config import FilterConfig, filter_spec
from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS, TokenizeConfig, tokenizer_spec
from llm_assets.compute.resource import ComputeResource
from llm_assets.paths import DATA_ROOT_ENV, PathEscapeError, inside, resolve_data_root, shown
from llm_assets.stages.engine import StageInputError
from llm_assets.stages.raw_documents import list_input_files
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import _failure_message
from llm_assets_tests.conftest import gpt2_folder


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
    # The input folder itself is named, not found: read where its link leads.
    (root / "linked").symlink_to(tmp_path, target_is_directory=True)
    assert _rel_names(root / "linked", root) == ["data/in/ok.jsonl", "secret.jsonl"]
    # A symlink that stays inside the root is fine.
    (root / "in" / "alias.jsonl").symlink_to(root / "in" / "ok.jsonl")
    assert len(list_input_files(root / "in", root.resolve())) == 2


def _raw_documents(input_dir, warehouse, raise_on_error=True) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        PIPELINE_ASSET_DEFS[:1],
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(warehouse)),
        },
        run_config={"ops": {"raw_documents": {"config": {"input_dir": str(input_dir)}}}},
        raise_on_error=raise_on_error,
    )


def test_an_input_folder_outside_the_data_root_is_read_where_it_is(tmp_path, monkeypatch):
    """raw_documents materialized for real from a folder beside the data root (named with
    ``..``, and relative to the working directory): read as it is, nothing to set first."""
    monkeypatch.delenv(DATA_ROOT_ENV)  # the default root: the folder holding the warehouse
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "a.jsonl").write_text('{"text": "hello there"}\n')
    (outside / "sub" / "b.jsonl").write_text('{"text": "and below"}\n')
    (outside / "alias.jsonl").symlink_to(outside / "a.jsonl")  # a link inside it: read
    data = tmp_path / "data"
    assert _raw_documents(data / ".." / "outside", data / "warehouse").success
    catalog = WarehouseResource(root=str(data / "warehouse")).catalog()
    assert catalog.query("SELECT source_file, text FROM raw_documents ORDER BY 1") == [
        ("a.jsonl", "hello there"),
        ("alias.jsonl", "hello there"),
        ("sub/b.jsonl", "and below"),
    ]
    monkeypatch.chdir(tmp_path)
    assert _raw_documents("outside", "data/warehouse2").success


def test_a_link_in_an_outside_input_folder_may_not_lead_out_of_it(tmp_path, monkeypatch):
    """The input folder is the root of what is found in it: a link out of it and out of the data
    root is refused, naming the link, where it leads, and both folders."""
    monkeypatch.delenv(DATA_ROOT_ENV)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.jsonl").write_text('{"text": "hello there"}\n')
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.jsonl").write_text('{"text": "not yours"}\n')
    (outside / "leak").symlink_to(secret, target_is_directory=True)
    data = tmp_path / "data"
    result = _raw_documents(outside, data / "warehouse", raise_on_error=False)
    assert not result.success
    message = _failure_message(result)
    assert str(outside / "leak") in message and str(secret.resolve()) in message
    assert f"outside the input folder {str(outside.resolve())!r}" in message
    assert f"outside the data root {str(data.resolve())!r}" in message
    assert not (data / "warehouse" / "raw_documents").exists()


def test_a_missing_relative_input_folder_is_named_with_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StageInputError) as err:
        list_input_files("data/smaple")
    assert str(err.value) == (
        f"input folder {str(tmp_path / 'data' / 'smaple')!r} ('data/smaple' in the working "
        f"directory {str(tmp_path)!r}) does not exist or is not a folder"
    )
    assert shown(tmp_path / "x" / "..") == repr(f"{tmp_path}/x/..")


def test_eval_sets_word_lists_and_tokenizers_outside_the_data_root_are_read(tmp_path):
    """Paths named in run config are inputs like the input folder: read where they are."""
    outside = tmp_path / "outside"
    (outside / "evals").mkdir(parents=True)
    (outside / "evals" / "bench.jsonl").write_text(
        '{"text": "which river flows through the old town of the capital city"}\n'
    )
    (outside / "words.txt").write_text("badword\n")
    root = tmp_path / "data"
    root.mkdir()
    config = FilterConfig(
        decontaminate={"paths": [str(outside / "evals")]},
        flagged_words={"path": str(outside / "words.txt")},
    )
    spec = filter_spec(config, root.resolve())
    assert spec.decontam.files == (
        (str((outside / "evals" / "bench.jsonl").resolve()), f"{outside / 'evals'}/bench.jsonl"),
    )
    folder = gpt2_folder(outside / "tokenizer", [], special=False)
    assert tokenizer_spec(TokenizeConfig(tokenizer=str(folder))).name == str(folder)


def _rel_names(input_dir, root) -> list[str]:
    return [rel for _, rel in list_input_files(input_dir, root.resolve())]


def test_symlinked_subfolder_inside_the_root_is_read_through_its_name(tmp_path):
    root = tmp_path / "data"
    (root / "in").mkdir(parents=True)
    (root / "in" / "a.jsonl").write_text('{"text": "direct"}\n')
    ext = root / "ext"
    (ext / "sub").mkdir(parents=True)
    (ext / "linked.jsonl").write_text('{"text": "through the link"}\n')
    (ext / "sub" / "deep.jsonl").write_text('{"text": "below the link"}\n')
    (ext / ".hidden.jsonl").write_text("ignored: hidden, also behind a link\n")
    (root / "in" / "link_dir").symlink_to(ext, target_is_directory=True)
    (root / "in" / ".hidden_link").symlink_to(ext, target_is_directory=True)
    assert _rel_names(root / "in", root) == [
        "a.jsonl",
        "link_dir/linked.jsonl",
        "link_dir/sub/deep.jsonl",
    ]
    # Read through the link: the path is the link's, which resolves to the real file.
    path = dict((rel, p) for p, rel in list_input_files(root / "in", root.resolve()))
    assert path["link_dir/linked.jsonl"].resolve() == (ext / "linked.jsonl").resolve()


def test_symlinked_subfolder_pointing_out_of_the_root_is_refused(tmp_path):
    root = tmp_path / "data"
    (root / "in").mkdir(parents=True)
    (root / "in" / "a.jsonl").write_text('{"text": "direct"}\n')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text('{"text": "not yours"}\n')
    (root / "in" / "deeper").mkdir()
    (root / "in" / "deeper" / "out_dir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StageInputError) as err:
        list_input_files(root / "in", root.resolve())
    message = str(err.value)
    assert "out_dir" in message and "outside the data root" in message
    assert str(root.resolve()) in message and str(outside.resolve()) in message


def test_symlink_cycles_and_aliases_read_each_real_folder_once(tmp_path):
    """A link to an ancestor (a cycle) or a second name for a folder already read is not
    followed; a folder inside the input folder keeps its real name even when a link to it sorts
    first; a folder outside the input folder is read under the first link's name."""
    root = tmp_path / "data"
    (root / "in" / "sub").mkdir(parents=True)
    (root / "in" / "a.jsonl").write_text('{"text": "a"}\n')
    (root / "in" / "sub" / "b.jsonl").write_text('{"text": "b"}\n')
    (root / "in" / "sub" / "back").symlink_to(root / "in", target_is_directory=True)
    (root / "in" / "sub" / "self").symlink_to(".", target_is_directory=True)
    (root / "in" / "0alias").symlink_to(root / "in" / "sub", target_is_directory=True)
    ext = root / "ext"
    ext.mkdir()
    (ext / "c.jsonl").write_text('{"text": "c"}\n')
    (ext / "up").symlink_to(root / "in", target_is_directory=True)  # back into the input
    (root / "in" / "x1").symlink_to(ext, target_is_directory=True)
    (root / "in" / "x2").symlink_to(ext, target_is_directory=True)
    assert _rel_names(root / "in", root) == [
        "a.jsonl",
        "sub/b.jsonl",
        "x1/c.jsonl",
    ]


def test_a_run_reads_the_files_under_a_symlinked_subfolder(tmp_path):
    """raw_documents materialized for real: the linked file's rows carry the name through the
    link as their source_file."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "read directly"}\n')
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "linked.jsonl").write_text('{"text": "read through the link"}\n')
    (tmp_path / "in" / "link_dir").symlink_to(tmp_path / "ext", target_is_directory=True)
    result = dg.materialize(
        PIPELINE_ASSET_DEFS[:1],
        resources={
            "compute": ComputeResource(),
            "warehouse": WarehouseResource(root=str(tmp_path / "wh")),
        },
        run_config={"ops": {"raw_documents": {"config": {"input_dir": str(tmp_path / "in")}}}},
    )
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path / "wh")).catalog()
    assert catalog.query("SELECT source_file, text FROM raw_documents ORDER BY 1") == [
        ("a.jsonl", "read directly"),
        ("link_dir/linked.jsonl", "read through the link"),
    ]
