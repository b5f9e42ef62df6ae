"""torch.compile of a MAML outer step as a pytest-benchmark suite: bench_compile.py's torch.func
steps (each it defines) eager and compiled (``fullgraph=True``), against
``diffopt.MetaAdam(use_accelerated_op=True)`` eager, on the sinusoid MLP (10 tasks, 3 inner Adam
steps).

The compiled contenders run with ``--compiled`` (inductor: a minute or more of compiling); in
quick mode it is traced with ``backend="eager"``, which proves the step still compiles as one
graph without paying for code generation. The compile time and the compiled-vs-eager
meta-gradient error are recorded beside the times. bench_compile.py ``--blockers-only`` still
prints what keeps diffopt's own code out of a graph.

    pytest benchmarks/maml/test_compile.py --compiled [--rounds 15]
"""

from __future__ import annotations

import time

import _suite
import bench_compile as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest
import torch

# The torch.func outer steps bench_compile.py defines, each timed eager and compiled.
STEP_FNS = {label: getattr(workloads, name) for label, name in
            (("func", "func_step_fn"), ("diffopt func", "diffopt_step_fn"))
            if hasattr(workloads, name)}
CONTENDERS = [f"{label} {mode}" for label in STEP_FNS for mode in ("compiled", "eager")]
CONTENDERS.append("MetaAdam eager")

REPORT = _suite.Report(
    title="torch.compile of the MAML outer step",
    pairs=[*(_suite.Pair(f"{label} eager", f"{label} compiled") for label in STEP_FNS),
           _suite.Pair("MetaAdam eager", f"{list(STEP_FNS)[-1]} compiled")],
    note="ratio = eager time / compiled time (medians); above 1: compiled is faster",
    notes=lambda done: [f"{label}: compile (first call) {w.info[label + ' compile_s']:.1f} s with "
                        f"backend {w.info['backend']}; compiled vs eager meta-gradient: max error "
                        f"{w.info[label + ' error']:.1e} relative to the largest entry."
                        for w in done for label in STEP_FNS if label + " compile_s" in w.info],
    ours=tuple(CONTENDERS),
    threads=1,
)


@pytest.mark.parametrize("contender", CONTENDERS)
@pytest.mark.parametrize("tasks", _suite.pick([10], [1]))
def test_compile(race, request, tasks, contender):
    backend = "inductor" if request.config.getoption("--compiled") else (
        "eager" if _suite.quick() else None)

    def build():
        x, y = workloads.sample_tasks(tasks, torch.Generator().manual_seed(1))
        fns: dict[str, object] = {
            "MetaAdam eager": workloads.make_meta_adam_runner(workloads.make_mlp(), tasks)}
        info: dict[str, object] = {"backend": backend}
        for label, make_step in STEP_FNS.items():
            net = workloads.make_mlp()
            step = make_step(net, tasks)
            fns[f"{label} eager"] = workloads.make_func_runner(step, workloads.make_mlp())
            if backend is None:
                fns[f"{label} compiled"] = "inductor compiling takes minutes: run with --compiled"
                continue
            compiled = torch.compile(step, fullgraph=True, backend=backend)
            params = {n: p.detach() for n, p in net.named_parameters()}
            started = time.perf_counter()
            got, _ = compiled(params, x, y)
            info[f"{label} compile_s"] = time.perf_counter() - started
            want, _ = step(params, x, y)
            scale = max(g.abs().max().item() for g in want.values())
            info[f"{label} error"] = max((got[n] - want[n]).abs().max().item()
                                         for n in want) / scale
            fns[f"{label} compiled"] = workloads.make_func_runner(compiled, workloads.make_mlp())
        return {name: (fn if isinstance(fn, str) else (lambda fn=fn: fn(x, y)))
                for name, fn in fns.items()}, info

    race(build, rounds=15, warmup=2)
