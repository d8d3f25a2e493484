"""A Ray cluster of two nodes and no shared disk: with the warehouse in object storage, every
worker reads and writes the bucket, the catalog stays with the driver, and the output is the
in-process run's."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import PIPELINE_ASSETS
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import SAMPLE_DIR, pipeline_run_config
from llm_assets_tests.warehouse.test_object_storage import current_checksums


def _materialize(input_dir, compute: ComputeResource, warehouse: WarehouseResource) -> None:
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": compute, "warehouse": warehouse},
        run_config=pipeline_run_config(input_dir),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]


@pytest.mark.slow
def test_two_nodes_without_a_shared_disk_give_the_in_process_output(s3, tmp_path, monkeypatch):
    """Both nodes run on this machine, started after the AWS environment is set, so their
    workers inherit it as a node's own credentials would be; no path of the driver's is given
    to them but the input files (``raw_documents`` reads the shipped sample)."""
    from ray.cluster_utils import Cluster

    shutil.copytree(SAMPLE_DIR, tmp_path / "input")
    monkeypatch.chdir(tmp_path)
    reference = WarehouseResource(
        root=s3.url("in_process"), catalog_path=str(tmp_path / "in_process.duckdb")
    )
    _materialize(tmp_path / "input", ComputeResource(), reference)

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        second = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        warehouse = WarehouseResource(
            root=s3.url("on_ray"), catalog_path=str(tmp_path / "on_ray.duckdb")
        )
        compute = ComputeResource(backend="ray", ray_address=cluster.address)
        _materialize(tmp_path / "input", compute, warehouse)
    finally:
        cluster.shutdown()

    catalog = warehouse.catalog()
    assert current_checksums(catalog) == current_checksums(reference.catalog())
    nodes = dict(catalog.query("SELECT node, count(*) FROM shards GROUP BY node"))
    assert nodes.get(f"ray:{second.node_id}", 0) > 0, nodes
    assert all(node.startswith("ray:") for node in nodes), nodes
    assert all(
        s.path.startswith(f"s3://{s3.bucket}/on_ray/")
        for asset in PIPELINE_ASSETS
        for s in catalog.current_shards(asset)
    )
