#!/usr/bin/env python3
"""Where one MAML outer step of bench_maml spends its time: torch.profiler and cProfile.

For each library configuration (as in ``bench_maml.py``): the number of aten ops and autograd
nodes one outer step runs, the self CPU time per op (torch.profiler, top rows), and the Python
functions with the most own time (cProfile over ``--steps-profiled`` outer steps).

    python benchmarks/maml/profile_maml.py [--problem mlp] [--inner adam] [--steps 3]
                                           [--libraries diffopt,torchopt] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_maml import LIBRARIES, available, make_full_step  # the benchmark's own problems


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
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    for library in args.libraries.split(","):
        if library not in LIBRARIES or available(library):
            print(f"skipping {library}: {available(library) if library in LIBRARIES else 'unknown'}")
            continue
        step = make_full_step(library, args.problem, args.inner, args.steps, device)
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        events = prof.key_averages()
        aten = [e for e in events if e.key.startswith("aten::")]
        nodes = [e for e in events if "Backward" in e.key or e.key.startswith("autograd::")]
        total = sum(e.self_cpu_time_total for e in events)
        print(f"\n=== {library}: {args.problem}/{args.inner}/{args.steps} steps, one outer step: "
              f"{sum(e.count for e in aten)} aten op calls, "
              f"{sum(e.count for e in nodes)} autograd node runs, "
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
