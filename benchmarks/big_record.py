"""Peak memory of one big record: a single-line JSON Lines file holding one document of ``--mb``
MB of words (and one small document), run through ``dagster job execute`` with the study's
workload, against the same run on a tiny record.

Samples the resident memory (RSS) of the run's process and every process it starts every 50 ms
and prints, per stage, the highest RSS of any one of them while that stage ran, then the peak of
the whole run minus the tiny run's: what the big record costs (issue 37's aim: at most 4x its
size).

    .venv/bin/python benchmarks/big_record.py --mb 60 --config configs/in_process.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from llm_assets.constants import PIPELINE_ASSETS

REPO = Path(__file__).resolve().parents[1]
WORDS = ("the", "of", "and", "to", "in", "is", "was", "for", "that", "with", "river", "history")


def _write_input(folder: Path, mb: float) -> None:
    """One document of ``mb`` MB of words on one line, then a small one."""
    rng = random.Random(0)
    parts, size = [], 0
    while size < mb * 1e6:
        word = rng.choice(WORDS)
        parts.append(word)
        size += len(word) + 1
    folder.mkdir(parents=True)
    small = "a small second document with enough words to pass the filters " * 3
    with open(folder / "doc.jsonl", "w") as out:
        out.write(json.dumps({"text": " ".join(parts)}) + "\n" + json.dumps({"text": small}) + "\n")


def _stage_of(log: Path, seen: str) -> str:
    """The stage the run's log names last (its lines say `` - <stage> - ``)."""
    tail = log.read_text(errors="replace")[-20000:]
    found = {stage: tail.rfind(f" - {stage} - ") for stage in PIPELINE_ASSETS}
    last = max(found, key=found.__getitem__)
    return last if found[last] >= 0 else seen


def _run(work: Path, mb: float, config: str) -> dict[str, int]:
    """Peak RSS in bytes of any one process of the run, per stage (``start``: before the first)."""
    _write_input(work / "in", mb)
    run_config = work / "run.yaml"
    run_config.write_text(
        f'ops:\n  raw_documents:\n    config:\n      input_dir: "{work / "in"}"\n'
        f'resources:\n  warehouse:\n    config:\n      root: "{work / "data" / "warehouse"}"\n'
        f'      data_root: "{work / "data"}"\n'
    )
    (work / "home").mkdir()
    dagster = Path(sys.executable).with_name("dagster")
    args = [str(dagster), "job", "execute", "-m", "llm_assets.definitions", "-j", "llm_pipeline"]
    for name in (config, "configs/study.yaml"):
        args += ["-c", str(REPO / name)]
    args += ["-c", str(run_config)]
    log = work / "run.log"
    env = {**os.environ, "DAGSTER_HOME": str(work / "home")}
    with open(log, "w") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work)
    root, peaks, stage = psutil.Process(process.pid), {}, "start"
    while process.poll() is None:
        stage = _stage_of(log, stage)
        try:
            rss = max(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            continue
        peaks[stage] = max(peaks.get(stage, 0), rss)
        time.sleep(0.05)
    if process.returncode:
        raise SystemExit(f"the run failed (exit {process.returncode}): see {log}")
    return peaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=60.0, help="size of the big document")
    parser.add_argument("--config", default="configs/in_process.yaml", help="backend config")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = _run(Path(tmp) / "tiny", 0.001, args.config)
        shutil.rmtree(Path(tmp) / "tiny")
        big = _run(Path(tmp) / "big", args.mb, args.config)
    mib = 1 << 20
    print(f"{'stage':<22} {'tiny MB':>8} {'big MB':>8}")
    for stage in ["start", *PIPELINE_ASSETS]:
        if stage in big:
            print(f"{stage:<22} {tiny.get(stage, 0) / mib:>8.0f} {big[stage] / mib:>8.0f}")
    extra = (max(big.values()) - max(tiny.values())) / 1e6
    print(
        f"peak {max(big.values()) / mib:.0f} MB against {max(tiny.values()) / mib:.0f} MB: "
        f"+{extra:.0f} MB for a {args.mb:g} MB record ({extra / args.mb:.1f}x its size)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
