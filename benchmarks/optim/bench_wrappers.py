"""Host time of torch.optim's wrappers around a drop-in's step: ``step()`` and ``zero_grad()``.

torch.optim wraps every ``step()`` (the step hooks and a profiler range, ``record_function``, entered
whether a profiler runs or not) and ``zero_grad()`` (the same range). fused_optim's drop-ins enter
them only where a profiler or a hook observes the call. This times, in one process and interleaved,
one training step's optimizer calls on many one-element tensors (all host time): fused_optim's
``step()`` + ``zero_grad()`` as shipped, the same fused step inside torch.optim's own wrappers, and
torch.optim's ``fused=True`` (else foreach) class for reference.

    python benchmarks/optim/bench_wrappers.py [--tensors 200] [--rounds 30] [--optimizers Adam SGD]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import fused_optim
from fused_optim.optim import _common

KWARGS = {"Adam": dict(lr=1e-3), "SGD": dict(lr=1e-3, momentum=0.9), "NAdam": dict(lr=1e-3)}
TORCH_FUSED = {"Adam", "SGD"}


def measure(name: str, tensors: int, rounds: int, calls: int) -> dict[str, float]:
    """Median us per step() + zero_grad() of each candidate on ``tensors`` one-element parameters."""
    params = [torch.nn.Parameter(torch.randn(1)) for _ in range(tensors)]
    grads = [torch.randn(1) for _ in params]
    ours = getattr(fused_optim, name)(params, **KWARGS[name])
    flag = "fused" if name in TORCH_FUSED else "foreach"
    reference = getattr(torch.optim, name)(params, **KWARGS[name], **{flag: True})
    torch_step = torch.optim.Optimizer.profile_hook_step(_common.FusedStep.step)  # (its no_grad included)
    candidates = {
        "fused_optim": lambda: (ours.step(), ours.zero_grad()),
        "wrapped": lambda: (torch_step(ours), torch.optim.Optimizer.zero_grad(ours)),
        "reference": lambda: (reference.step(), reference.zero_grad()),
    }
    times: dict[str, list[float]] = {k: [] for k in candidates}
    for block in range(rounds + 1):  # the first: state created, steps kept
        for key, call in candidates.items():
            total = 0.0
            for _ in range(calls):
                for p, g in zip(params, grads):
                    p.grad = g
                start = time.perf_counter()
                call()
                total += time.perf_counter() - start
            if block:
                times[key].append(total / calls * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=50, help="calls per timed block")
    parser.add_argument("--optimizers", nargs="+", default=["Adam", "SGD"], choices=sorted(KWARGS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, fused_optim fast path: {fused_optim.BUILD_INFO['eager']}, "
          f"{args.tensors} one-element tensors, 1 thread; us per step() + zero_grad(), medians of "
          f"{args.rounds} interleaved blocks of {args.calls}\n")
    print("| optimizer | fused_optim | its step in torch.optim's wrappers | torch's reference | wrappers saved |")
    print("|---|---|---|---|---|")
    for name in args.optimizers:
        med = measure(name, args.tensors, args.rounds, args.calls)
        flag = "fused" if name in TORCH_FUSED else "foreach"
        print(f"| {name} | {med['fused_optim']:.1f} | {med['wrapped']:.1f} | {med['reference']:.1f} "
              f"(`{flag}=True`) | {med['wrapped'] - med['fused_optim']:.1f} us |")


if __name__ == "__main__":
    main()
