"""Distributed MAML over torch RPC as a pytest-benchmark suite: sequential (1 and 2 threads)
against diffopt.distributed with 1 and 2 worker processes, on bench_distributed.py's workload
(the sinusoid MLP, 16 tasks, 5 inner MetaSGD steps), for each way of splitting the tasks.

Each contender runs in fresh processes (bench_distributed.py's ``--role``), which time their own
outer steps after warm-up; one sample = the median step of one launch, the launches interleaved
round by round (benchmarks/_suite.py). Each launch also reports every rank's CPU time per step:
the "CPU-bound speed-up" (sequential CPU / the busiest rank's CPU) is what the same code would get
with a free core per worker, which a shared machine's wall time hides.

    pytest benchmarks/distributed [--rounds 5] [-k "block"]
"""

from __future__ import annotations

import argparse
import statistics

import _suite
import bench_distributed as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest

BASELINE = "sequential, 1 thread"
CONFIGS = {BASELINE: ("sequential", 1, 1), "sequential, 2 threads": ("sequential", 1, 2),
           "distributed, 1 worker": ("distributed", 1, 1),
           "distributed, 2 workers": ("distributed", 2, 1)}
# Every partition bench_distributed.py knows (block: one RPC per worker; task: one per task; ...)
PARTITIONS = _suite.pick(list(getattr(workloads, "STEPS", {"block": None, "task": None})),
                         ["block"])
TASKS = _suite.pick([16], [2])


def _notes(done: list[_suite.Workload]) -> list[str]:
    lines = ["| partition | tasks | configuration | CPU ms/step per rank | CPU-bound speed-up | "
             "meta-grad max diff |", "|---|---:|---|---:|---:|---:|"]
    for w in done:
        extras = {name: o.extras for name, o in w.outcomes.items() if o.extras}
        if BASELINE not in extras:
            continue
        seq_cpu = statistics.median(e["cpu_per_rank"][0] for e in extras[BASELINE])
        for name, runs in extras.items():
            cpu = [statistics.median(e["cpu_per_rank"][i] for e in runs)
                   for i in range(len(runs[0]["cpu_per_rank"]))]
            diff = max((e.get("grad_diff", 0.0) for e in runs), default=0.0)
            lines.append(f"| {w.params['partition']} | {w.params['tasks']} | {name} | "
                         + " / ".join(f"{c * 1e3:.1f}" for c in cpu)
                         + f" | {seq_cpu / max(cpu):.2f}x | "
                         + (f"{diff:.1e}" if name.startswith("distributed") else "-") + " |")
    return lines


REPORT = _suite.Report(
    title="distributed MAML (RPC)",
    pairs=[_suite.Pair(BASELINE, "distributed, 2 workers", 1.6, name="speed-up, 2 workers"),
           _suite.Pair(BASELINE, "distributed, 1 worker", name="speed-up, 1 worker"),
           _suite.Pair(BASELINE, "sequential, 2 threads", name="speed-up, 2 threads")],
    note="ratio = sequential (1 thread) time / the configuration's (medians); above 1: faster",
    notes=_notes,
    ours=tuple(CONFIGS),
)


def launch_args(partition: str, tasks: int) -> argparse.Namespace:
    """What bench_distributed.launch() passes on to each process (its command-line defaults)."""
    return argparse.Namespace(
        width=40, tasks=tasks, k=10, inner_steps=_suite.pick(5, 1), steps=_suite.pick(20, 1),
        warmup=_suite.pick(3, 0), partition=partition, torch_transports=False)


@pytest.mark.parametrize("contender", list(CONFIGS))
@pytest.mark.parametrize("tasks", TASKS)
@pytest.mark.parametrize("partition", PARTITIONS)
def test_distributed(race, partition, tasks, contender):
    args = launch_args(partition, tasks)

    def launcher(role: str, workers: int, threads: int):
        def run() -> dict:
            result = workloads.launch(args, role, workers, threads)
            return {**result, "seconds": result.pop("wall")}

        return run

    race(lambda: {name: launcher(*config) for name, config in CONFIGS.items()}, rounds=5,
         warmup=0, self_timed=True)
