#!/usr/bin/env python3
"""Meta-learn a tiny dataset that a linear classifier can fit in a few steps (dataset distillation).

100 learnable 2-D points (50 labelled 0, 50 labelled 1) are the only training data of a logistic
regression that starts from zero and takes 3 differentiable SGD steps on them
(``diffopt.MetaSGD``). The outer loss is the adapted classifier's logistic loss on real data; its
gradient with respect to the *points* flows back through the three inner steps, and Adam moves the
points. Afterwards, 3 SGD steps on the 100 learned points give a classifier nearly as good as one
fitted to the real data, while 3 steps on the initial random points give whatever accuracy their
random arrangement happens to encode.

    python packages/diffopt/examples/learned_dataset.py [--iterations 300] [--plot PATH]

A progress bar (on stderr; ``--no-progress``, ``NO_PROGRESS=1`` or ``TQDM_DISABLE=1`` hides it)
follows the outer loss; a summary table of the results closes the run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import diffopt


def real_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Points of N(0, I) labelled by a line at 60 degrees that misses the origin."""
    x = torch.randn(n, 2, generator=generator)
    normal = torch.tensor([math.cos(math.pi / 3), math.sin(math.pi / 3)])
    return x, (x @ normal + 0.3 > 0).float()


def fit(net: nn.Module, points: torch.Tensor, labels: torch.Tensor, steps: int,
        lr: float) -> None:
    """``steps`` differentiable SGD steps of logistic regression on (points, labels)."""
    opt = diffopt.MetaSGD(net, lr=lr)
    for _ in range(steps):
        opt.step(F.binary_cross_entropy_with_logits(net(points).squeeze(-1), labels))


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return ((net(x).squeeze(-1) > 0).float() == y).float().mean().item()


def progress_bar(iterable, no_progress: bool, **kwargs):
    """A tqdm bar on stderr, so stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise ImportError("the progress bar needs tqdm: pip install 'diffopt[examples]'") from error
    if no_progress or os.environ.get("NO_PROGRESS", "") not in ("", "0"):
        kwargs["disable"] = True  # never pass disable=False: it would override TQDM_DISABLE=1
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--inner-steps", type=int, default=3)
    parser.add_argument("--inner-lr", type=float, default=1.0)
    parser.add_argument("--outer-lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=Path("out/learned_dataset.png"))
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # tiny tensors: threading costs more than it saves
    generator = torch.Generator().manual_seed(args.seed)
    x_test, y_test = real_data(4000, generator)
    points = torch.randn(args.points, 2, generator=generator).requires_grad_()
    labels = torch.cat([torch.zeros(args.points // 2), torch.ones(args.points - args.points // 2)])
    initial_points = points.detach().clone()

    net = nn.Linear(2, 1)
    nn.init.zeros_(net.weight)
    nn.init.zeros_(net.bias)
    start = diffopt.extract_state_dict(net)
    outer_opt = torch.optim.Adam([points], lr=args.outer_lr)

    def evaluate(data: torch.Tensor) -> float:
        fit(net, data, labels, args.inner_steps, args.inner_lr)
        acc = accuracy(net, x_test, y_test)
        diffopt.recover_state_dict(net, start)
        return acc

    before = evaluate(initial_points)
    outer_losses = []
    started = time.perf_counter()
    bar = progress_bar(range(args.iterations), args.no_progress, desc="learning the dataset")
    for _ in bar:
        x_real, y_real = real_data(256, generator)
        outer_opt.zero_grad()
        fit(net, points, labels, args.inner_steps, args.inner_lr)
        outer = F.binary_cross_entropy_with_logits(net(x_real).squeeze(-1), y_real)
        outer.backward()  # d outer / d points, through the 3 inner SGD steps
        diffopt.recover_state_dict(net, start)
        outer_opt.step()
        outer_losses.append(outer.item())
        bar.set_postfix(refresh=False, outer_loss=f"{outer_losses[-1]:.3f}")
    bar.close()
    elapsed = time.perf_counter() - started
    after = evaluate(points.detach())
    print(f"test accuracy of a classifier trained {args.inner_steps} SGD steps on "
          f"{args.points} points: random points {before:.1%} -> learned points {after:.1%}")
    first, last = outer_losses[:10], outer_losses[-10:]
    print("\n| metric | value |\n|---|---|")
    print(f"| outer loss on real data, mean of the first -> last 10 steps | "
          f"{sum(first) / len(first):.3f} -> {sum(last) / len(last):.3f} |")
    print(f"| test accuracy after {args.inner_steps} SGD steps on the {args.points} points | "
          f"{before:.1%} (random) -> {after:.1%} (learned) |")
    print(f"| outer steps, wall time | {args.iterations} in {elapsed:.1f} s |")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 5), sharex=True, sharey=True)
    for ax, data, title in ((axes[0], initial_points, f"initial points ({before:.0%})"),
                            (axes[1], points.detach(), f"learned points ({after:.0%})")):
        ax.scatter(x_test[:, 0], x_test[:, 1], c=y_test, cmap="coolwarm", s=2, alpha=0.15)
        ax.scatter(data[:, 0], data[:, 1], c=labels, cmap="coolwarm", edgecolors="k", s=30)
        ax.set_title(title)
        ax.set_xlim(-3.5, 3.5)
        ax.set_ylim(-3.5, 3.5)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=100)
    plt.close(fig)
    print(f"saved plot of the learned dataset to {args.plot.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
