#!/usr/bin/env python3
"""Pytree operations under a profiler, or side by side in CPU time on a loaded machine.

``--loop`` calls one operation of one library on one tree of bench_pytree.py in a loop, with the
collector off, for ``perf record`` to sample (nothing else runs in the loop):

    perf record -g python benchmarks/pytree/profile_pytree.py --loop optree_core "plain 100000" \\
        unflatten --calls 400

``--compare`` times optree_core against the other libraries named, in interleaved rounds, by the
thread's CPU time (``time.thread_time``) rather than wall time: on a box whose cores other jobs
share, time spent waiting for a core never enters a sample, so ratios stay readable at load 5
where the suite's wall-time medians swing by 20%. Each sample is the mean of a calibrated loop
(>= 30 ms of CPU), the collector off; prints medians and the peer/optree_core ratio per row:

    python benchmarks/pytree/profile_pytree.py --compare --libraries jax \\
        --trees "plain 100000" "resnet152 modules" --ops unflatten --rounds 11

Trees are named as in the suite: "plain N", "odict/ntuple N", "resnetXX modules|state_dict".
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the suite's calibration
import bench_pytree as workloads
from _suite import calibrate


def make_tree(name: str) -> Any:
    kind, size = name.rsplit(" ", 1)
    if kind == "plain":
        return workloads.plain_tree(int(size))
    if kind == "odict/ntuple":
        return workloads.ordered_tree(int(size))
    return dict(workloads.model_trees((kind,)))[name]


def compare(libraries: list[str], trees: list[str], ops: list[str], rounds: int) -> None:
    libs = {name: workloads.LOADERS[name]() for name in ["optree_core", *libraries]}
    print(f"load average {os.getloadavg()[0]:.1f}; CPU time per call, medians of {rounds} rounds")
    for tree_name in trees:
        tree = make_tree(tree_name)
        for op in ops:
            fns = {name: workloads.operation(lib, tree, op) for name, lib in libs.items()}
            loops = {name: calibrate(fn, 0.03, time.thread_time) for name, fn in fns.items()}
            samples: dict[str, list[float]] = {name: [] for name in fns}
            names = list(fns)
            for r in range(rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:  # rotated order
                    gc.collect()
                    gc.disable()
                    start = time.thread_time()
                    for _ in range(loops[name]):
                        fns[name]()
                    samples[name].append((time.thread_time() - start) / loops[name])
                    gc.enable()
            medians = {name: statistics.median(s) for name, s in samples.items()}
            ours = medians["optree_core"]
            cells = [f"{name} {medians[name] * 1e6:.2f} us" for name in names]
            ratios = [f"{name}/ours {medians[name] / ours:.2f}" for name in names[1:]]
            print(f"{tree_name} | {op} | " + " | ".join(cells + ratios), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


def loop(library: str, tree_name: str, op: str, calls: int) -> None:
    fn = workloads.operation(workloads.LOADERS[library](), make_tree(tree_name), op)
    fn()
    gc.disable()
    start = time.thread_time()
    for _ in range(calls):
        fn()
    print(f"{library} {tree_name} {op}: {(time.thread_time() - start) / calls * 1e6:.2f} us/call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--loop", nargs=3, metavar=("LIBRARY", "TREE", "OP"))
    mode.add_argument("--compare", action="store_true")
    parser.add_argument("--calls", type=int, default=200, help="--loop: calls to make")
    parser.add_argument("--libraries", nargs="+", default=["jax"], help="--compare: the peers")
    parser.add_argument("--trees", nargs="+", default=["plain 100000"])
    parser.add_argument("--ops", nargs="+", default=list(workloads.OPS), choices=workloads.OPS)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    if args.loop:
        loop(*args.loop, args.calls)
    else:
        compare(args.libraries, args.trees, args.ops, args.rounds)


if __name__ == "__main__":
    main()
