"""Muon: fused_optim.Muon's step() against torch.optim.Muon's.

torch.optim.Muon orthogonalizes one matrix at a time (about 16 matrix products and a dozen small
ops each, in bfloat16) and runs its element-wise parts op by op; fused_optim.Muon makes one fused
pass for the momentum and Nesterov blend of every matrix, one batched Newton-Schulz chain per
shape, and one fused decay-and-update pass per shape. Workloads: 64 matrices of 256 x 256, 24 of
1024 x 1024, and the matrices of a small transformer (4 layers of d_model 512: q, k, v, o of
512 x 512, the MLP's 2048 x 512 and 512 x 2048, tall and wide).

Each figure is the median of interleaved repeats after a warm-up, with
``torch.set_num_threads(--threads)`` (on CUDA, synchronized around each step). Ratios are
time(torch) / time(fused_optim): above 1 wins.

    python benchmarks/optim/bench_muon.py [--threads 2] [--repeats 20] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

import fused_optim

CASES = {
    "64 x 256x256": [(256, 256)] * 64,
    "24 x 1024x1024": [(1024, 1024)] * 24,
    "transformer 4 x d512": [(512, 512)] * 16 + [(2048, 512)] * 4 + [(512, 2048)] * 4,
}


def median_times(fns: list[Callable[[], object]], repeats: int, sync: Callable[[], None], warmup: int = 3
                 ) -> list[float]:
    """Median seconds of each callable, run interleaved round after round (a burst of load on a
    shared machine then hits every candidate alike)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def step_case(shapes: list[tuple[int, int]], repeats: int, device: str) -> tuple[float, float]:
    opts = []
    for cls in (torch.optim.Muon, fused_optim.Muon):
        gen = torch.Generator().manual_seed(0)  # the same numbers for both
        params = [torch.randn(s, generator=gen).to(device).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        opts.append(cls(params, lr=0.02))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    base, ours = median_times([opt.step for opt in opts], repeats, sync)
    return base, ours


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-2 else f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", nargs="*", default=list(CASES), help="a subset of: " + ", ".join(CASES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{args.threads} threads"
    print(f"torch {torch.__version__}, fused_optim {fused_optim.__version__}, {args.device} ({where}), "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| case | torch.optim.Muon | fused_optim.Muon | ratio |")
    print("|---|---|---|---|")
    for label in args.cases:
        base, ours = step_case(CASES[label], args.repeats, args.device)
        print(f"| step(), {label} | {fmt(base)} | {fmt(ours)} | {base / ours:.2f}x |", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
