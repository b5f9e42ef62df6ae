#!/usr/bin/env python3
"""Where one MAML outer step of bench_maml spends its time: torch.profiler and cProfile.

For each library configuration (as in ``bench_maml.py``): the number of aten ops and autograd
nodes one outer step runs, the self CPU time per op (torch.profiler, top rows), and the Python
functions with the most own time (cProfile over ``--steps-profiled`` outer steps).

``--compare`` puts the contenders side by side instead, in interleaved rounds: per contender,
the process CPU time, wall time and minor page faults of one outer step (no profiler attached),
its aten op calls and autograd node runs, and its profiled self CPU split into the ops that touch
a full-size activation (``--big``: an input of at least that many elements; the convolutions,
BatchNorm, pooling and their backward and double backward) and everything else (the optimizer,
the small per-parameter ops, the engine: where libraries can differ); then whether every
contender ran the same full-size ops (the same op, shapes and strides, as often), and the op
names of the rest whose self CPU differs most; the full-size ops' thread CPU time by name (each
such op timed alone, so an op that runs slower for one contender shows); and which contenders'
networks are no longer finite (only with ``--no-restore``). A contender may be named twice: the
difference between its two copies is the noise floor of the measurement. ``--cpu-only`` keeps
just the timing (no profiler passes, so many rounds are cheap) and prints TorchOpt's process CPU
over diffopt's for each configuration pair: the figure to use on a shared, loaded box, where
wall time is mostly waiting for a core. With ``--inner sgd``, the contender ``floor-func`` is the
functional path's two multi-tensor ops with no library around them: the floor under any
functional SGD, and so the bound on TorchOpt-func / diffopt-func for the workload.

    python benchmarks/maml/profile_maml.py [--problem mlp] [--inner adam] [--steps 3]
                                           [--libraries diffopt,torchopt] [--top 15]
    python benchmarks/maml/profile_maml.py --compare --problem conv --steps 1 --rounds 7 \\
        --libraries diffopt,diffopt,torchopt
    python benchmarks/maml/profile_maml.py --compare --cpu-only --problem mlp --inner sgd \\
        --steps 3 --rounds 40 --libraries diffopt,torchopt,diffopt-func,torchopt-func
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import math
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from _suite import round_order
from bench_maml import LIBRARIES, PAIRS, available, make_full_step  # the benchmark's own problems


class _FloorSGD:
    """The ``floor-func`` contender (SGD only): the functional path's two multi-tensor ops,
    ``u = g * -lr`` and ``p + u``, with no library around them (no tree flattening, no checks,
    no chain): what any functional SGD must at least run, so TorchOpt's time over this one bounds
    the ratio an optimizer library can reach on the workload."""

    def __init__(self, lr: float) -> None:
        self.factor = torch.scalar_tensor(-lr)

    def init(self, params):
        return ()

    def update(self, grads, state, inplace=False):
        return torch._foreach_mul(grads, self.factor), state

    @staticmethod
    def apply_updates(params, updates, inplace=False):
        return tuple(torch._foreach_add(params, updates))


def _floor_module():
    module = type(sys)("floor")
    module.sgd = _FloorSGD
    module.apply_updates = _FloorSGD.apply_updates
    sys.modules["floor"] = module  # bench_maml imports the functional contender by name


def _counts(events) -> tuple[int, int]:
    """aten op calls and autograd node runs among the profiler's averaged events."""
    aten = sum(e.count for e in events if e.key.startswith("aten::"))
    nodes = sum(e.count for e in events if "Backward" in e.key or e.key.startswith("autograd::"))
    return aten, nodes


class _BigOps(TorchDispatchMode):
    """Counts the (op, input shapes and strides) of every op with a full-size tensor input, and
    sums each such op's thread CPU time by op name."""

    def __init__(self, big: int) -> None:
        super().__init__()
        self.big = big
        self.seen: collections.Counter = collections.Counter()
        self.cpu: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not any(t.numel() >= self.big for t in tensors):
            return func(*args, **(kwargs or {}))
        self.seen[(str(func), tuple((tuple(t.shape), t.stride()) for t in tensors))] += 1
        start = time.thread_time()
        out = func(*args, **(kwargs or {}))
        self.cpu[str(func)] += time.thread_time() - start
        return out


def compare(names: list[str], steps: list, args) -> None:
    """The side-by-side report of ``--compare`` (see the module docstring)."""
    labels = [f"{name}#{names[:i].count(name) + 1}" if names.count(name) > 1 else name
              for i, name in enumerate(names)]
    cpu: dict[str, list[float]] = {label: [] for label in labels}
    wall: dict[str, list[float]] = {label: [] for label in labels}
    faults: dict[str, list[int]] = {label: [] for label in labels}
    self_ms: dict[str, dict[str, list[float]]] = {label: collections.defaultdict(list)
                                                  for label in labels}
    split: dict[str, dict[str, list[float]]] = {label: {"big": [], "rest": []} for label in labels}
    calls: dict[str, dict[str, int]] = {}
    signatures: dict[str, collections.Counter] = {}
    big_cpu: dict[str, dict[str, list[float]]] = {label: collections.defaultdict(list)
                                                  for label in labels}
    for r in range(args.rounds):
        order = round_order(labels, r)  # balanced, as the suite does
        for label, step in ((label, steps[labels.index(label)]) for label in order):
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start, wall_start = time.process_time(), time.perf_counter()
            step()
            cpu[label].append(time.process_time() - start)
            wall[label].append(time.perf_counter() - wall_start)
            faults[label].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0)
            if args.cpu_only:
                continue
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                step()
            big = 0.0
            rest: dict[str, float] = collections.defaultdict(float)
            rest_calls: dict[str, int] = collections.defaultdict(int)
            for e in prof.key_averages(group_by_input_shape=True):
                largest = max((math.prod(s) for s in e.input_shapes
                               if isinstance(s, list) and all(isinstance(n, int) for n in s)),
                              default=0)
                if largest >= args.big:
                    big += e.self_cpu_time_total / 1e3
                else:
                    rest[e.key] += e.self_cpu_time_total / 1e3
                    rest_calls[e.key] += e.count
            split[label]["big"].append(big)
            split[label]["rest"].append(sum(rest.values()))
            for key, ms in rest.items():
                self_ms[label][key].append(ms)
            calls[label] = dict(rest_calls)
            calls[label]["(totals)"] = _counts(prof.key_averages())
            mode = _BigOps(args.big)
            with mode:
                step()
            signatures[label] = mode.seen
            for key, seconds in mode.cpu.items():
                big_cpu[label][key].append(seconds * 1e3)

    med = statistics.median
    print(f"\n=== {args.problem}/{args.inner}/{args.steps} steps, one outer step, medians of "
          f"{args.rounds} interleaved rounds (load average {_load()})")
    if args.cpu_only:
        # Process CPU time is what the libraries spend; on a loaded box wall time is mostly waiting.
        print("| contender | CPU ms | wall ms |\n|---|---:|---:|")
        for label in labels:
            print(f"| {label} | {med(cpu[label]) * 1e3:.2f} | {med(wall[label]) * 1e3:.2f} |")
        for ours, theirs in [*PAIRS, ("floor-func", "torchopt-func"), ("floor-func", "diffopt-func")]:
            if ours in labels and theirs in labels:
                print(f"{theirs} / {ours} (CPU medians): "
                      f"{med(cpu[theirs]) / med(cpu[ours]):.3f}")
        return
    print("| contender | CPU ms | wall ms | minor faults | aten calls | autograd nodes | profiled self ms: "
          f"ops on >= {args.big} elements | the rest |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label in labels:
        aten, nodes = calls[label]["(totals)"]
        print(f"| {label} | {med(cpu[label]) * 1e3:.1f} | {med(wall[label]) * 1e3:.1f} | "
              f"{med(faults[label]):.0f} | {aten} | "
              f"{nodes} | {med(split[label]['big']):.1f} | {med(split[label]['rest']):.1f} |")
    first = signatures[labels[0]]
    for label in labels[1:]:
        same = signatures[label] == first
        diff = (signatures[label] - first) + (first - signatures[label])
        print(f"full-size ops of {label} vs {labels[0]}: "
              + ("identical" if same else f"{sum(diff.values())} differ, e.g. "
                 f"{list(diff.items())[:3]}")
              + f" ({sum(first.values())} calls)")
    print(f"\nfull-size ops by name: median thread CPU ms (timed one by one), top {args.top}:")
    print("| op | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for key in sorted(big_cpu[labels[0]], key=lambda k: -med(big_cpu[labels[0]][k]))[:args.top]:
        print(f"| {key} | " + " | ".join(
            f"{med(big_cpu[label][key]):.2f}" if big_cpu[label].get(key) else "-"
            for label in labels) + " |")
    for label, step in zip(labels, steps):
        finite = all(bool(torch.isfinite(p).all()) for p in step.parameters)
        if not finite:
            print(f"{label}: the network's parameters are not all finite after the rounds "
                  "(--no-restore kept every outer update)")
    keys = set().union(*(set(self_ms[label]) for label in labels))
    cell = {(label, key): med(self_ms[label][key]) if self_ms[label].get(key) else 0.0
            for label in labels for key in keys}
    spread = sorted(keys, key=lambda k: -(max(cell[(lb, k)] for lb in labels)
                                          - min(cell[(lb, k)] for lb in labels)))
    print(f"\nthe rest, by op name: median self CPU ms / calls where the contenders differ most, "
          f"top {args.top}:")
    print("| op | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for key in spread[:args.top]:
        print(f"| {key[:60]} | " + " | ".join(
            f"{cell[(label, key)]:.2f} / {calls[label].get(key, 0)}" for label in labels) + " |")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="mlp", choices=["mlp", "conv"])
    parser.add_argument("--inner", default="adam", choices=["sgd", "adam"])
    parser.add_argument("--steps", type=int, default=3, help="inner steps")
    parser.add_argument("--libraries", default="diffopt,torchopt")
    parser.add_argument("--steps-profiled", type=int, default=20,
                        help="outer steps under cProfile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--no-cprofile", action="store_true")
    parser.add_argument("--compare", action="store_true",
                        help="the contenders side by side, in interleaved rounds")
    parser.add_argument("--rounds", type=int, default=5, help="--compare: interleaved rounds")
    parser.add_argument("--no-restore", action="store_true",
                        help="keep each outer update (train), as bench_maml did before: a "
                             "library whose meta-gradient has NaN then runs a NaN network")
    parser.add_argument("--cpu-only", action="store_true",
                        help="--compare: only the process CPU and wall time of each contender "
                             "(no profiler passes), and TorchOpt / diffopt per configuration")
    parser.add_argument("--big", type=int, default=10000,
                        help="--compare: elements that make an op input full-size")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    names, steps = [], []
    for library in args.libraries.split(","):
        if library == "floor-func" and args.inner == "sgd":
            _floor_module()
        elif library not in LIBRARIES or available(library):
            print(f"skipping {library}: {available(library) if library in LIBRARIES else 'unknown'}")
            continue
        names.append(library)
        steps.append(make_full_step(library, args.problem, args.inner, args.steps, device,
                                    restore=not args.no_restore))
    if args.compare:
        for step in steps:
            for _ in range(3):
                step()
        compare(names, steps, args)
        return 0
    for library, step in zip(names, steps):
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        events = prof.key_averages()
        aten, nodes = _counts(events)
        total = sum(e.self_cpu_time_total for e in events)
        print(f"\n=== {library}: {args.problem}/{args.inner}/{args.steps} steps, one outer step: "
              f"{aten} aten op calls, {nodes} autograd node runs, "
              f"{total / 1e3:.1f} ms profiled self CPU")
        print(events.table(sort_by="self_cpu_time_total", row_limit=args.top))
        if not args.no_cprofile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.steps_profiled):
                step()
            profiler.disable()
            print(f"--- cProfile, {args.steps_profiled} outer steps, by own time:")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
