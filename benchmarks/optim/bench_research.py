"""Lion and Adan: fused-optim's step() against the pure-PyTorch foreach implementation.

torch.optim has neither optimizer, so the baseline is what a user without fused-optim would write:
``fused_optim._reference.Lion``/``Adan``, on torch's ``_foreach`` ops as torch.optim's default path
is (the same classes the tests check the fused step against). Also times the differentiable
update (forward + backward) against the op-by-op PyTorch reference's autograd.

Each figure is the median of many interleaved repeats after a warm-up, with
``torch.set_num_threads(--threads)``. Ratios are time(baseline) / time(fused_optim): above 1 wins.

    python benchmarks/optim/bench_research.py [--threads 2] [--repeats 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

import fused_optim
from fused_optim import _reference
from fused_optim.ops import apply_functional

KWARGS = {"Lion": dict(lr=1e-4, weight_decay=0.1), "Adan": dict(lr=1e-3, weight_decay=0.02)}


def median_times(fns: list[Callable[[], object]], repeats: int, warmup: int = 5) -> list[float]:
    """Median seconds of each callable, run interleaved round after round (a burst of load on a
    shared machine then hits every candidate alike)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def step_case(name: str, shapes: list[tuple[int, ...]], repeats: int) -> tuple[float, float]:
    opts = []
    for cls in (getattr(_reference, name), getattr(fused_optim, name)):
        gen = torch.Generator().manual_seed(0)  # the same numbers for both
        params = [torch.randn(s, generator=gen).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opts.append(cls(params, **KWARGS[name]))
    base, ours = median_times([opt.step for opt in opts], repeats)
    return base, ours


def update_case(op: str, n: int, numel: int, repeats: int) -> tuple[float, float]:
    """Forward + backward of one differentiable update on n tensors."""
    gen = torch.Generator().manual_seed(1)
    lion = op == "lion_update"
    kwargs = (dict(lr=1e-4, beta1=0.9, beta2=0.99, weight_decay=0.1, maximize=False) if lion else
              dict(step=3, lr=1e-3, beta1=0.98, beta2=0.92, beta3=0.99, eps=1e-8, weight_decay=0.02,
                   no_prox=False, maximize=False))
    lists = [[torch.randn(numel, generator=gen) for _ in range(n)] for _ in range(3 if lion else 6)]
    for i in range(n):
        if not lion:
            lists[4][i] = lists[4][i].abs()
    leaves = [[t.requires_grad_() for t in lst] for lst in lists[:2]] + lists[2:]

    def fused() -> None:
        out = apply_functional(op, leaves, kwargs)
        torch.autograd.backward(out[0], [torch.ones_like(t) for t in out[0]])

    def reference() -> None:
        out = getattr(_reference, op)(*leaves, **kwargs)
        torch.autograd.backward(out[0], [torch.ones_like(t) for t in out[0]])

    base, ours = median_times([reference, fused], repeats)
    return base, ours


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-2 else f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, fused_optim {fused_optim.__version__}, {args.threads} threads, "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| case | pure-PyTorch foreach | fused_optim | ratio |")
    print("|---|---|---|---|")
    for name in ("Lion", "Adan"):
        for label, shapes, repeats in (("200 x 1k", [(1000,)] * 200, args.repeats),
                                       ("4 x 4M", [(4_000_000,)] * 4, max(args.repeats // 10, 10))):
            base, ours = step_case(name, shapes, repeats)
            print(f"| {name}.step(), {label} | {fmt(base)} | {fmt(ours)} | {base / ours:.2f}x |")
    print()
    print("| case | op-by-op PyTorch autograd | fused node | ratio |")
    print("|---|---|---|---|")
    for op in ("lion_update", "adan_update"):
        base, ours = update_case(op, 200, 1000, args.repeats)
        print(f"| {op} forward + backward, 200 x 1k | {fmt(base)} | {fmt(ours)} | {base / ours:.2f}x |")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
