#!/usr/bin/env python3
"""Meta-learn a dataset with DistributedDataParallel: a differentiable inner loop inside forward.

The model is the dataset: 100 learnable 2-D points (50 labelled 0, 50 labelled 1). Its forward
fits a *fresh* linear classifier (a random start of its own on every rank and every step) with 3
differentiable SGD steps on the points, and returns the adapted classifier's logistic loss on a
batch of real data. ``backward`` sends that loss's gradient through the three inner steps back to
the points, and DistributedDataParallel all-reduces it: every rank then holds the mean of the
ranks' meta-gradients and takes the same outer Adam step, as in ordinary data-parallel training.

The inner loop runs one of three ways (``--inner``): ``meta-sgd`` (``diffopt.MetaSGD``),
``meta-adam`` (``diffopt.MetaAdam``) or ``functional`` (``diffopt.sgd`` over a dict of tensors).

Launch with torchrun, on one machine:

    torchrun --standalone --nproc_per_node=2 \\
        packages/diffopt/examples/distributed/learned_dataset_ddp.py [--iterations 200]

or on several (see "Distributed data parallel" in packages/diffopt/README.md):

    torchrun --nnodes=2 --nproc_per_node=4 --rdzv-backend=c10d --rdzv-endpoint=HOST:29400 \\
        --rdzv-id=learned-dataset packages/diffopt/examples/distributed/learned_dataset_ddp.py

Plain ``python learned_dataset_ddp.py`` runs it as a world of one process. The backend is gloo
on CPU and nccl when every rank has a GPU (``--device cuda``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import diffopt

INNER_LOOPS = ("meta-sgd", "meta-adam", "functional")


def real_data(n: int, generator: torch.Generator, dtype: torch.dtype = torch.float32):
    """Points of N(0, I) labelled by a line at 60 degrees that misses the origin."""
    x = torch.randn(n, 2, generator=generator, dtype=dtype)
    normal = torch.tensor([math.cos(math.pi / 3), math.sin(math.pi / 3)], dtype=dtype)
    return x, (x @ normal + 0.3 > 0).to(dtype)


class LearnedDataset(nn.Module):
    """A learnable labelled dataset whose forward is "fit a classifier on me, score it on real data".

    Args:
        n_points: how many points to learn (half labelled 0, half 1).
        inner: how the inner loop runs: ``"meta-sgd"``, ``"meta-adam"`` or ``"functional"``.
        inner_steps: differentiable optimizer steps of the inner loop.
        inner_lr: their learning rate.
        generator: draws the initial points.
    """

    def __init__(self, n_points: int = 100, inner: str = "meta-sgd", inner_steps: int = 3,
                 inner_lr: float = 1.0, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if inner not in INNER_LOOPS:
            raise ValueError(f"inner must be one of {INNER_LOOPS}, got {inner!r}")
        self.points = nn.Parameter(torch.randn(n_points, 2, generator=generator))
        self.register_buffer("labels", torch.cat([torch.zeros(n_points // 2),
                                                  torch.ones(n_points - n_points // 2)]))
        self.inner, self.inner_steps, self.inner_lr = inner, inner_steps, inner_lr

    def fit(self, classifier: nn.Linear) -> dict[str, torch.Tensor]:
        """The classifier's weights after the inner loop, differentiable w.r.t. the points."""
        if self.inner == "functional":
            params = dict(classifier.named_parameters())
            opt = diffopt.sgd(lr=self.inner_lr)
            state = opt.init(params)
            for _ in range(self.inner_steps):
                logits = torch.func.functional_call(classifier, params, (self.points,)).squeeze(-1)
                loss = F.binary_cross_entropy_with_logits(logits, self.labels)
                grads = dict(zip(params, torch.autograd.grad(loss, tuple(params.values()),
                                                             create_graph=True)))
                updates, state = opt.update(grads, state, inplace=False)
                params = diffopt.apply_updates(params, updates, inplace=False)
            return params
        if self.inner == "meta-sgd":
            opt = diffopt.MetaSGD(classifier, lr=self.inner_lr)
        else:
            opt = diffopt.MetaAdam(classifier, lr=0.1 * self.inner_lr)
        for _ in range(self.inner_steps):
            opt.step(F.binary_cross_entropy_with_logits(classifier(self.points).squeeze(-1), self.labels))
        return dict(classifier.named_parameters())

    def forward(self, x_real: torch.Tensor, y_real: torch.Tensor,
                classifier: nn.Linear) -> torch.Tensor:
        """Outer loss: ``classifier`` fitted on the points, scored on ``(x_real, y_real)``.

        ``classifier`` is a fresh ``nn.Linear(2, 1)`` that is not part of this module (its start
        is not meta-learned, so DDP must not synchronize it).
        """
        params = self.fit(classifier)
        logits = torch.func.functional_call(classifier, params, (x_real,)).squeeze(-1)
        return F.binary_cross_entropy_with_logits(logits, y_real)


def fresh_classifier(seed: int, dtype: torch.dtype, device: torch.device) -> nn.Linear:
    """An ``nn.Linear(2, 1)`` with a small random start drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    classifier = nn.Linear(2, 1).to(dtype)
    with torch.no_grad():
        classifier.weight.copy_(0.1 * torch.randn(1, 2, generator=generator, dtype=dtype))
        classifier.bias.zero_()
    return classifier.to(device)


def accuracy(model: LearnedDataset, x: torch.Tensor, y: torch.Tensor, seed: int) -> float:
    classifier = fresh_classifier(seed, x.dtype, x.device)
    params = {k: v.detach() for k, v in model.fit(classifier).items()}
    logits = torch.func.functional_call(classifier, params, (x,)).squeeze(-1)
    return ((logits > 0).to(y.dtype) == y).to(torch.float64).mean().item()


def setup(device: str) -> tuple[int, int]:
    """Joins torchrun's process group (gloo on CPU, nccl on GPU); a world of one without torchrun."""
    backend = "nccl" if device == "cuda" else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend)
    else:  # plain `python learned_dataset_ddp.py`: an in-memory store, no network at all
        os.environ.setdefault("LOCAL_RANK", "0")
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--inner", choices=INNER_LOOPS, default="meta-sgd")
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256, help="real points per rank and step")
    parser.add_argument("--outer-lr", type=float, default=0.05)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # tiny tensors, and one process per core
    rank, world = setup(args.device)
    try:
        device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if args.device == "cuda" else "cpu")
        # The same initial points on every rank (DDP also broadcasts rank 0's at construction).
        model = LearnedDataset(args.points, args.inner, generator=torch.Generator().manual_seed(args.seed))
        model = model.to(device)
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        outer_opt = torch.optim.Adam(ddp.parameters(), lr=args.outer_lr)
        data = torch.Generator().manual_seed(args.seed + 1000 + rank)  # each rank its own real data
        x_test, y_test = real_data(4000, torch.Generator().manual_seed(args.seed + 1))
        x_test, y_test = x_test.to(device), y_test.to(device)
        before = accuracy(model, x_test, y_test, seed=0)
        if rank == 0:
            print(f"learned dataset with DDP: {world} rank(s), inner loop {args.inner}, "
                  f"{args.iterations} outer steps")
        losses, started = [], time.perf_counter()
        for step in range(args.iterations):
            x_real, y_real = (t.to(device) for t in real_data(args.batch, data))
            classifier = fresh_classifier(args.seed + 7919 * step + rank, x_real.dtype, device)
            outer_opt.zero_grad()
            loss = ddp(x_real, y_real, classifier)
            loss.backward()  # through the inner loop to the points, then all-reduced by DDP
            outer_opt.step()
            losses.append(loss.item())
        after = accuracy(model, x_test, y_test, seed=0)
        mean_loss = torch.tensor([sum(losses[:10]) / max(len(losses[:10]), 1),
                                  sum(losses[-10:]) / max(len(losses[-10:]), 1)], dtype=torch.float64)
        dist.all_reduce(mean_loss)
        mean_loss /= world
        if rank == 0:
            print(f"| outer loss, mean over ranks of the first -> last 10 steps | "
                  f"{mean_loss[0]:.3f} -> {mean_loss[1]:.3f} |")
            print(f"| test accuracy after {model.inner_steps} inner steps on the points | "
                  f"{before:.1%} (initial) -> {after:.1%} (learned) |")
            print(f"| wall time | {time.perf_counter() - started:.1f} s |")
        dist.barrier()  # tear down together: gloo can abort when one rank leaves early
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
