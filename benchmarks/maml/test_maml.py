"""MAML outer steps as a pytest-benchmark suite: diffopt (plain and with the accelerated op)
against TorchOpt (the same two configurations) and higher, on bench_maml.py's problems (the
sinusoid MLP over 10 tasks, the 4-layer conv net over 2 tasks; 1, 3, 5 inner SGD or Adam steps).

One sample = one full outer step (inner loops, meta-backward, outer Adam update), the
contenders interleaved (benchmarks/_suite.py), 1 thread unless ``--threads``. Before timing, each
peer's float64 meta-gradient is checked against diffopt's; the graph each saves for backward
(exact MiB) and, outside quick mode, the peak RSS growth (a fresh process per contender, through
bench_maml.py's ``--worker``) are recorded beside the times (``--no-memory``: neither); with one
inner Adam step, a float64 finite-difference check says which side is right where they disagree.

    pytest benchmarks/maml [--rounds 10] [-k "conv and adam"] [--device cuda]

Under ``--device cuda`` the models and tasks live on the GPU, each sample ends with
``torch.cuda.synchronize()`` (so it times the device's work too), and the peak memory column is
``torch.cuda.max_memory_allocated`` growth instead of RSS.
"""

from __future__ import annotations

import json
import subprocess
import sys

import _suite
import bench_maml as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest
import torch

CASES = _suite.pick([("mlp", "sgd"), ("mlp", "adam"), ("conv", "sgd"), ("conv", "adam")],
                    [("mlp", "sgd"), ("conv", "adam")])
STEPS = _suite.pick([1, 3, 5], [1])


def _conv(params) -> bool:
    return params["problem"] == "conv"


def _notes(done: list[_suite.Workload]) -> list[str]:
    checks = [status for w in done for status in w.info["checks"].values()]
    lines = [f"Meta-gradients (float64): {checks.count('OK')} of {len(checks)} checks agree with "
             "plain diffopt's" + "".join(f"; {checks.count(s)} {s}" for s in sorted(set(checks) - {"OK"}))
             + "."]
    for w in done:
        for lib, status in w.info["checks"].items():
            if status != "OK":
                lines.append(f"- {w.params['problem']}/{w.params['inner']}/{w.params['steps']}: "
                             f"{lib}: {status} ({w.info['check_details'][lib]})")
    for w in done:
        for lib, err in w.info.get("finite_difference", {}).items():
            lines.append(f"- float64 finite-difference check, {w.params['problem']} / 1 Adam "
                         f"step: {lib}: max err {err:.1e} (relative to the largest entry)")
    lines += ["", "| problem | inner | steps | " + " | ".join(
        f"{lib} graph / RSS MiB" for lib in workloads.LIBRARIES) + " |",
        "|---|---|---:|" + "---:|" * len(workloads.LIBRARIES)]
    for w in done:
        cells = [(f"{w.info['graph_mib'][lib]:.3f} / " + (
            f"{w.info['peak_mib'][lib]:.0f}" if lib in w.info["peak_mib"] else "-")
                  if lib in w.info["graph_mib"] else "-") for lib in workloads.LIBRARIES]
        lines.append(f"| {w.params['problem']} | {w.params['inner']} | {w.params['steps']} | "
                     + " | ".join(cells) + " |")
    return lines


# Each diffopt configuration against the same TorchOpt configuration (bench_maml.PAIRS where it
# lists them), then each library's best configuration against diffopt's best.
SAME_CONFIGURATION = getattr(workloads, "PAIRS", [("diffopt", "torchopt"),
                                                  ("diffopt-accel", "torchopt-accel")])
DIFFOPT = tuple(lib for lib in workloads.LIBRARIES if lib.startswith("diffopt"))
TORCHOPT = tuple(lib for lib in workloads.LIBRARIES if lib.startswith("torchopt"))

REPORT = _suite.Report(
    title="MAML outer step",
    pairs=[*(_suite.Pair(theirs, ours, 1.1) for ours, theirs in SAME_CONFIGURATION),
           _suite.Pair(TORCHOPT, DIFFOPT, 1.25, _conv, "conv", name="torchopt best / diffopt best"),
           _suite.Pair("higher", DIFFOPT, 1.5, name="higher / diffopt best")],
    note="ratio = peer time / diffopt time (medians); above 1: diffopt is faster",
    notes=_notes,
    threads=1,
)


def peak_mib(library: str, problem: str, inner: str, steps: int, device: torch.device) -> float:
    """Peak RSS growth over 3 outer steps, in a fresh process (bench_maml.py --worker)."""
    command = [sys.executable, workloads.__file__, "--worker", f"{library}:{problem}:{inner}:{steps}",
               "--threads", str(torch.get_num_threads()), "--device", str(device)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


@pytest.mark.parametrize("contender", workloads.LIBRARIES)
@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize(("problem", "inner"), CASES)
def test_maml(race, request, problem, inner, steps, contender):
    device = torch.device(request.config.getoption("--device"))
    memory = not request.config.getoption("--no-memory")

    def build():
        fns: dict[str, object] = {}
        for lib in workloads.LIBRARIES:
            reason = workloads.available(lib)
            if inner == "sgd" and "accel" in lib:
                reason = "the accelerated op is Adam's"
            fns[lib] = reason or workloads.make_full_step(lib, problem, inner, steps, device)
        runnable = [lib for lib, fn in fns.items() if not isinstance(fn, str)]
        checks, details = {}, {}
        if len(runnable) > 1:
            reference = workloads.meta_gradient("diffopt", problem, inner, steps, device)
        for lib in runnable[1:]:
            err, bad = workloads.compare(reference,
                                         workloads.meta_gradient(lib, problem, inner, steps, device))
            status = ("OK" if err < 1e-6 else "MISMATCH") + (" on the finite entries" if bad else "")
            checks[lib] = status
            details[lib] = f"max err {err:.1e}" + (f", {bad} non-finite entries" if bad else "")
        info = {"checks": checks, "check_details": details,
                "graph_mib": {lib: workloads.graph_mib(lib, problem, inner, steps, device)
                              for lib in runnable} if memory else {},
                "peak_mib": {lib: peak_mib(lib, problem, inner, steps, device) for lib in runnable}
                if memory and not _suite.quick() else {}}
        if inner == "adam" and steps == 1 and len(runnable) > 1 and not _suite.quick():
            # Which side is right where the libraries disagree (printed with the checks).
            info["finite_difference"] = workloads.finite_difference_check(runnable, problem, device)
        return fns, info

    race(build, rounds=10, warmup=2, sync=torch.cuda.synchronize if device.type == "cuda" else None)
