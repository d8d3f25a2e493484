"""What a second core gives on this machine: the same CPU-bound work in one process alone, then in
two processes at once, each timed after its imports and a warm-up.

``multiprocess`` can at best do the work of one process in ``1 / scaling`` of its time, where
``scaling = 2 x (seconds alone) / (seconds of the slower of the pair)``: 2.0 on two free,
independent cores, less when the two share a physical core, caches or memory bandwidth, or when
the machine's neighbours take their share. The CPU seconds of the pair over those of one process
alone say how much each process slows the other down, which the pipeline's multiprocess CPU
seconds then include.

Workloads: ``python`` (an integer loop: the interpreter alone), ``tokenize`` (our tokenize kernel,
GPT-2 on tiktoken, on generated rows), ``normalize`` (our ``ascii_lower`` normalize kernel).

    .venv/bin/python benchmarks/core_scaling.py --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = ("python", "tokenize", "normalize")


def _work(name: str, rows: int):
    """A function doing ``name``'s work once (its set-up done here, outside the timing)."""
    if name == "python":

        def spin() -> None:
            total = 0
            for i in range(rows * 1000):
                total += i

        return spin
    import pyarrow as pa

    from llm_assets.datagen.corpus import generate_records

    texts = [record["text"] for record in generate_records(rows)]
    table = pa.table({"doc_id": [str(i) for i in range(rows)], "text": texts})
    if name == "tokenize":
        from llm_assets.kernels.tokenize.spec import TokenizerSpec
        from llm_assets.kernels.tokenize.table import tokenize_table

        spec = TokenizerSpec()
        return lambda: tokenize_table(table, spec)
    from llm_assets.kernels.normalize import NormalizeSpec, normalize_table

    spec = NormalizeSpec(preset="ascii_lower")
    return lambda: [normalize_table(table, spec) for _ in range(5)]


def _child(name: str, rows: int, ready: str, go: str) -> None:
    """Set up, warm up, say ready, wait for the go, then print the timed run's wall and CPU s."""
    work = _work(name, rows)
    work()
    Path(ready).touch()
    while not os.path.exists(go):
        time.sleep(0.002)
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    print(f"{time.perf_counter() - wall:.4f} {time.process_time() - cpu:.4f}")


def _run(name: str, rows: int, processes: int) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each of ``processes`` children doing the work at the same time."""
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        children = []
        for i in range(processes):
            ready = os.path.join(tmp, f"ready-{i}")
            args = [sys.executable, __file__, "--child", name, str(rows), ready, go]
            children.append((ready, subprocess.Popen(args, stdout=subprocess.PIPE, text=True)))
        while not all(os.path.exists(ready) for ready, _ in children):
            if any(child.poll() not in (None, 0) for _, child in children):
                raise RuntimeError(f"a {name} child failed before it was ready")
            time.sleep(0.01)
        Path(go).touch()
        results = []
        for _, child in children:
            out, _ = child.communicate()
            if child.returncode:
                raise RuntimeError(f"a {name} child failed (exit {child.returncode})")
            wall, cpu = out.split()
            results.append((float(wall), float(cpu)))
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="pairs of measurements (medians)")
    parser.add_argument("--rows", type=int, default=50_000, help="rows per timed run")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    args = parser.parse_args(argv)
    print(f"{'workload':<10} {'alone s':>8} {'pair s':>8} {'scaling':>8} {'CPU pair/alone':>15}")
    for name in args.workloads:
        alone, pair, cpu_alone, cpu_pair = [], [], [], []
        for _ in range(args.runs):  # alternating, so that drift hits both alike
            ((wall, cpu),) = _run(name, args.rows, 1)
            alone.append(wall)
            cpu_alone.append(cpu)
            both = _run(name, args.rows, 2)
            pair.append(max(w for w, _ in both))
            cpu_pair.append(sum(c for _, c in both) / 2)
        a, p = statistics.median(alone), statistics.median(pair)
        cpu_ratio = statistics.median(cpu_pair) / statistics.median(cpu_alone)
        print(f"{name:<10} {a:>8.3f} {p:>8.3f} {2 * a / p:>7.2f}x {cpu_ratio:>14.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        sys.exit(main())
