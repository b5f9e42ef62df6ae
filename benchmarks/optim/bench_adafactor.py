"""Adafactor's step() on many tensors: fused_optim against torch.optim.Adafactor(foreach=True).

Adafactor reduces per tensor between its fused passes (the RMS of each parameter and update, the
row and column statistics of each matrix), so its host time grows with the number of tensors in a
way an element-wise optimizer's does not. This times, in one process and interleaved, the median
step() of both on one workload and prints one JSON line (microseconds, and torch's median over
fused_optim's). Run it under two interpreters (two builds) to compare builds on the same box.

    python benchmarks/optim/bench_adafactor.py [--shape 1000] [--tensors 200] [--threads 1]
        [--dtype float32] [--rounds 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import fused_optim


def measure(shape: list[int], tensors: int, dtype: torch.dtype, rounds: int) -> dict[str, float]:
    """Median us per step() of fused_optim's and torch's foreach Adafactor, interleaved."""

    def make(cls: type[torch.optim.Optimizer], **kwargs: object) -> torch.optim.Optimizer:
        gen = torch.Generator().manual_seed(0)
        params = [torch.randn(shape, generator=gen).to(dtype).requires_grad_() for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn(shape, generator=gen).to(dtype)
        return cls(params, lr=1e-2, **kwargs)

    candidates = {"fused_optim": make(fused_optim.Adafactor), "torch_foreach": make(torch.optim.Adafactor,
                                                                                      foreach=True)}
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for opt in candidates.values():  # the state is made on the first step
        opt.step()
    for _ in range(rounds):
        for name, opt in candidates.items():
            start = time.perf_counter()
            opt.step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1000", help="one tensor's shape, e.g. 1000 or 32x32")
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape = [int(s) for s in args.shape.split("x")]
    medians = measure(shape, args.tensors, getattr(torch, args.dtype), args.rounds)
    print(json.dumps({"case": f"{args.tensors} x {args.shape} {args.dtype}, {args.threads} thread(s)",
                      **{f"{name}_us": round(us, 1) for name, us in medians.items()},
                      "torch_foreach / fused_optim": round(medians["torch_foreach"] / medians["fused_optim"], 2)}))


if __name__ == "__main__":
    main()
