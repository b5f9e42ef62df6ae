"""Implicit hyper-gradients as a pytest-benchmark suite: diffopt's ``custom_root`` + CG against
TorchOpt's ``custom_root`` + CG and against unrolling, on bench_implicit.py's iMAML problem.

``test_implicit`` (the recorded workload): both libraries solve the Hessian system by CG
(``solve_cg``, the right solver for this symmetric problem). ``test_implicit_normal_cg``: each
library's default linear solver, CG on the normal equations (``solve_normal_cg``, what TorchOpt's
own iMAML example uses), at the ``T`` where it can reach the unrolled accuracy in float32
(T = 25, 50: at T = 100, 200 its error floor, ~1e-5, is above unrolling's).

One workload = ``T`` inner steps. Before timing, ``K`` (CG iterations) is the smallest of
``CG_GRID`` whose hyper-gradient is as accurate as the unrolled one against a float64 reference
(quick mode: no reference, ``K`` = 2); each contender's error is recorded beside its time, and
outside quick mode the peak RSS growth of unrolled and implicit (fresh processes through
bench_implicit.py's ``--child``). One sample = one full hyper-gradient, contenders interleaved
(benchmarks/_suite.py), 1 thread unless ``--threads``.

    pytest benchmarks/implicit [--rounds 5] [-k 100]
"""

from __future__ import annotations

import functools

import _suite
import bench_implicit as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest
import torch

STEPS = _suite.pick([25, 50, 100, 200], [5])
NORMAL_CG_STEPS = _suite.pick([25, 50], [5])
CONTENDERS = ["diffopt implicit", "torchopt implicit", "unrolled"]


def _notes(done: list[_suite.Workload]) -> list[str]:
    lines = ["| T | K | " + " | ".join(f"{c} rel. err" for c in CONTENDERS)
             + " | unrolled / implicit peak MiB |", "|---:|---:|" + "---:|" * (len(CONTENDERS) + 1)]
    for w in done:
        errors = w.info["errors"]
        memory = w.info.get("memory")
        lines.append(f"| {w.params['steps']} | {w.info['K']} | "
                     + " | ".join(f"{errors[c]:.1e}" if c in errors else "-" for c in CONTENDERS)
                     + " | " + (f"{memory[0]:.1f} / {memory[1]:.1f}" if memory else "-") + " |")
    return lines


_NOTE = ("ratio = peer time / diffopt implicit time (medians), at the same accuracy; above 1: "
         "diffopt is faster")
REPORT = {
    "test_implicit": _suite.Report(
        title="implicit hyper-gradient (iMAML)",
        pairs=[_suite.Pair("torchopt implicit", "diffopt implicit", 1.3),
               _suite.Pair("unrolled", "diffopt implicit", 5.0, lambda p: p["steps"] == 100,
                           "T=100")],
        note=_NOTE, notes=_notes, threads=1),
    "test_implicit_normal_cg": _suite.Report(
        title="implicit hyper-gradient (iMAML), each library's default solver (normal CG)",
        pairs=[_suite.Pair("torchopt implicit", "diffopt implicit", 1.3)],
        note=_NOTE, notes=_notes, threads=1),
}


@functools.cache
def reference() -> tuple[torch.Tensor, ...]:
    return workloads.reference_hypergradient()


@functools.cache
def problem() -> dict:
    return workloads.make_problem()


def _race(race, request, steps, solve, contenders):
    def build():
        data = problem()
        fns = {
            "diffopt implicit": lambda k: workloads.implicit_hypergradient(data, steps, k, solve),
            "torchopt implicit": (
                lambda k: workloads.torchopt_hypergradient(data, steps, k, solve))
            if workloads.torchopt is not None else "torchopt is not installed",
            "unrolled": lambda _: workloads.unrolled_hypergradient(data, steps),
        }
        fns = {name: fn for name, fn in fns.items() if name in contenders}
        k, info = 2, {"errors": {}}
        if not _suite.quick():
            k, info["errors"] = workloads.accuracy_matched(data, steps, reference(), solve)
        if solve == "cg" and not _suite.quick() and not request.config.getoption("--no-memory"):
            threads = torch.get_num_threads()
            info["memory"] = (workloads.peak_memory("unrolled", steps, 0, threads),
                              workloads.peak_memory("implicit", steps, k, threads))
        info["K"] = k
        return {name: fn if isinstance(fn, str) else functools.partial(fn, k)
                for name, fn in fns.items()}, info

    race(build, rounds=5, warmup=1)


@pytest.mark.parametrize("contender", CONTENDERS)
@pytest.mark.parametrize("steps", STEPS)
def test_implicit(race, request, steps, contender):
    _race(race, request, steps, "cg", CONTENDERS)


@pytest.mark.parametrize("contender", CONTENDERS[:2])
@pytest.mark.parametrize("steps", NORMAL_CG_STEPS)
def test_implicit_normal_cg(race, request, steps, contender):
    _race(race, request, steps, "normal_cg", CONTENDERS[:2])
