"""Where an implicit hyper-gradient's time goes: the inner solver, then each library's backward.

bench_implicit.py's iMAML problem (MLP 32-256-1, 512 points, ``T`` gradient-descent steps, ``K``
CG iterations at the accuracy of unrolling): one round times, interleaved, the inner solver alone
(the ``T`` steps both libraries run as the user wrote them), diffopt's full hyper-gradient and
TorchOpt's. "backward" = full - inner solver: what ``custom_root`` and the linear solve cost,
the only part the library controls. Medians over rounds, 1 thread. ``--profile`` adds a cProfile
of each library's hyper-gradient (top functions by own time).

    python benchmarks/implicit/profile_implicit.py [--rounds 9] [--steps 25 50 100 200]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_implicit as workloads

# K per T: the smallest of bench_implicit.CG_GRID as accurate as unrolling (its last run).
K_AT_SAME_ACCURACY = {25: 12, 50: 16, 100: 24, 200: 64}


def inner_solver(problem: dict, steps: int):
    theta = tuple(t.detach() for t in problem["theta"])
    return workloads.gradient_descent(theta, theta, problem["data"], steps)


def contenders(problem: dict, steps: int, k: int) -> dict:
    fns = {"inner solver": lambda: inner_solver(problem, steps),
           "diffopt": lambda: workloads.implicit_hypergradient(problem, steps, k)}
    if workloads.torchopt is not None:
        fns["TorchOpt"] = lambda: workloads.torchopt_hypergradient(problem, steps, k)
    return fns


def top_functions(fn, repeats: int = 3, limit: int = 8) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeats):
        fn()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(limit)
    return "\n".join(line for line in out.getvalue().splitlines()
                     if line.strip() and not line.startswith(("   Ordered", "   List")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=list(K_AT_SAME_ACCURACY))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="cProfile each hyper-gradient")
    args = parser.parse_args()
    torch.set_num_threads(1)
    problem = workloads.make_problem()
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} interleaved rounds, medians; "
          f"TorchOpt {'present' if workloads.torchopt is not None else 'absent'}")
    print("\n| T | K | inner solver ms | diffopt ms | TorchOpt ms | diffopt backward ms | "
          "TorchOpt backward ms | TorchOpt / diffopt (full) | (backward) | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for steps in args.steps:
        k = K_AT_SAME_ACCURACY.get(steps, 16)
        fns = contenders(problem, steps, k)
        for fn in fns.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
        ours_bwd = med["diffopt"] - med["inner solver"]
        peer = med.get("TorchOpt", float("nan"))
        peer_bwd = peer - med["inner solver"]
        print(f"| {steps} | {k} | {med['inner solver']:.1f} | {med['diffopt']:.1f} | {peer:.1f} | "
              f"{ours_bwd:.1f} | {peer_bwd:.1f} | {peer / med['diffopt']:.2f} | "
              f"{peer_bwd / ours_bwd:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
        if args.profile:
            for name in ("diffopt", "TorchOpt"):
                if name in fns:
                    print(f"\ncProfile, {name}, T={steps}, K={k} (3 calls):\n"
                          + top_functions(fns[name]))


if __name__ == "__main__":
    main()
