"""``benchmark_report``: the study's workload on every compute backend and several data sizes."""

import json
import shutil

import dagster as dg
from pydantic import Field

from llm_assets.assets.reporting.charts import image_markdown
from llm_assets.assets.reporting.summary import benchmark_summary
from llm_assets.constants import BENCHMARK_REPORT, CATALOG_POOL
from llm_assets.machine import git_commit, machine_info
from llm_assets.stages.raw_documents import DEFAULT_ROWS_PER_SHARD
from llm_assets.warehouse.benchmarks import HISTORY_SQL, RESULTS_TABLE, record_results
from llm_assets.warehouse.resource import WarehouseResource

BENCHMARK_GROUP = "benchmark"


class BenchmarkConfig(dg.Config):
    sizes: list[int] = Field(
        [1_000, 32_000, 200_000], description="Generated corpus sizes in rows (add 1000000 for 1M)"
    )
    backends: list[str] = Field(
        ["in_process", "multiprocess", "ray"],
        description="Our compute backends to measure: in_process, multiprocess, ray",
    )
    repetitions: int = Field(3, description="Measured runs per size and backend (median kept)")
    workers: int = Field(
        0, description="Worker processes / Ray CPUs; 0 means every core (negative: refused)"
    )
    include_reference: bool = Field(
        True, description="Also re-measure the study's own runners on the same rows"
    )
    include_peers: bool = Field(
        True,
        description="Also run HF datasets and datatrove on the same rows, when installed "
        "(pip install -e '.[peers]'); a missing one is skipped with a warning",
    )
    reference_ray_max_rows: int = Field(
        32_000,
        description="Largest size for the study's Ray runner (one remote call per row: slow)",
    )
    warmup: bool = Field(True, description="One unmeasured warm-up run per runner first")
    rows_per_shard: int = Field(DEFAULT_ROWS_PER_SHARD, description="Rows per shard")
    seed: int = Field(0, description="Seed of the generated corpora")


@dg.asset(
    name=BENCHMARK_REPORT,
    group_name=BENCHMARK_GROUP,
    kinds={"duckdb", "python"},
    pool=CATALOG_POOL,
)
def benchmark_report(
    context: dg.AssetExecutionContext, config: BenchmarkConfig, warehouse: WarehouseResource
) -> dg.MaterializeResult:
    """How fast, and with how much memory, each compute backend runs the published study's
    workload (``ascii_lower``, GPT-2, drop < 10 tokens, batches) on this machine, at several sizes
    of generated data, next to the study's own runners re-measured here and the peers (HF
    datasets, datatrove) when installed; every repetition is
    appended to the catalog table ``benchmark_results`` (history across runs and commits) as soon
    as it is measured, so a run that fails midway keeps what it measured."""
    # The benchmark's machinery is imported when it runs, not when the definitions load (every
    # pipeline run, UI load and sensor tick loads them).
    from llm_assets.bench.peers import PEER_RUNNERS, installed_peers
    from llm_assets.bench.reference import REFERENCE_RUNNERS
    from llm_assets.bench.report import markdown_report, winners, write_charts
    from llm_assets.bench.runner import BenchmarkPlan, RunResult, Workload, run_benchmark, summarize

    run_id = context.run.run_id
    base = (
        warehouse.catalog_file.parent if warehouse.remote else warehouse.root_path
    ) / BENCHMARK_REPORT
    run_dir = base / run_id
    work_dir = run_dir / "work"
    plan = BenchmarkPlan(
        sizes=tuple(sorted(set(config.sizes))),
        backends=tuple(config.backends),
        reference_runners=REFERENCE_RUNNERS if config.include_reference else (),
        peer_runners=installed_peers(PEER_RUNNERS, context.log.warning)
        if config.include_peers
        else (),
        repetitions=config.repetitions,
        workers=config.workers,
        warmup=config.warmup,
        reference_max_rows={"ray": config.reference_ray_max_rows},
        seed=config.seed,
        workload=Workload(rows_per_shard=config.rows_per_shard),
    )
    context.log.info(f"benchmark: {len(plan.runs())} configuration(s) x {plan.repetitions} run(s)")
    machine = machine_info()
    commit = git_commit()
    catalog = warehouse.catalog()
    written = 0

    def record(result: RunResult) -> None:
        nonlocal written
        written += record_results(catalog, run_id, [result], machine=machine, commit=commit)

    try:
        results = run_benchmark(
            plan,
            data_dir=base / "data" / f"seed-{config.seed}",
            work_dir=work_dir,
            log=context.log,
            on_result=record,
        )
    except Exception:
        context.log.error(
            f"benchmark: failed; the {written} repetition(s) measured before are kept in "
            f"{RESULTS_TABLE}"
        )
        raise
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    summaries = summarize(results)
    context.log.info(f"benchmark: {written} result row(s) appended to {RESULTS_TABLE}")
    charts = write_charts(summaries, run_dir)
    images = {
        "Throughput": image_markdown(charts["throughput"], "rows per second vs rows"),
        "Memory": image_markdown(charts["memory"], "peak PSS vs rows"),
    }
    report = markdown_report(summaries, machine=machine, commit=commit)
    (run_dir / "report.md").write_text(report)
    fastest = winners(summaries)
    best = {str(size): s.backend for size, s in fastest.items()}
    summary = benchmark_summary(
        {
            size: (s.backend, s.median.rows_per_second, s.median.peak_total_pss_mb)
            for size, s in fastest.items()
        },
        machine,
        written,
    )
    return dg.MaterializeResult(
        metadata={
            "summary": dg.MetadataValue.md(summary.markdown()),
            "report": dg.MetadataValue.md(report),
            "throughput_chart": dg.MetadataValue.md(images["Throughput"]),
            "memory_chart": dg.MetadataValue.md(images["Memory"]),
            "throughput_chart_path": dg.MetadataValue.path(str(charts["throughput"])),
            "memory_chart_path": dg.MetadataValue.path(str(charts["memory"])),
            "winners": dg.MetadataValue.json(best),
            "results": dg.MetadataValue.json(
                [s.median.as_dict() | {"repetitions": s.repetitions} for s in summaries]
            ),
            "rows_recorded": written,
            "git_commit": commit or "unknown",
            "machine": dg.MetadataValue.json(machine),
            "query": dg.MetadataValue.md(f"```sql\n-- duckdb {catalog.path}\n{HISTORY_SQL}\n```"),
            "config": dg.MetadataValue.json(json.loads(config.model_dump_json())),
        }
    )
