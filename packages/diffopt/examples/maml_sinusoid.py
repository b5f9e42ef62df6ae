#!/usr/bin/env python3
"""MAML on sinusoid regression (Finn et al., 2017, sec. 5.1), with diffopt's meta-optimizers.

Each task is a sinusoid ``y = A sin(x + phase)`` with ``A`` in [0.1, 5] and phase in [0, pi],
observed at ``K`` random points of [-5, 5]. MAML learns an initialization of a small MLP from which
a few SGD steps on the K support points fit the task's query points. The inner loop runs through
``diffopt.MetaSGD``, whose steps are differentiable, so the query loss back-propagates through
them to the initialization; the outer loop is a plain ``torch.optim.Adam``.

The script shows a progress bar (on stderr) with the meta-train loss and, every ``--eval-every``
iterations, the meta-test loss (query MSE after adaptation on held-out tasks), prints a summary
table, then saves a plot of adapted sinusoids and of the learning curves to the file it names.
Defaults run in about a minute on CPU:

    python packages/diffopt/examples/maml_sinusoid.py [--iterations 5000] [--plot PATH]

``--no-progress`` (or ``NO_PROGRESS=1``, or tqdm's ``TQDM_DISABLE=1``) hides the bar.
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


def sample_tasks(n_tasks: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Amplitudes and phases of ``n_tasks`` random sinusoids."""
    amplitude = 0.1 + 4.9 * torch.rand(n_tasks, generator=generator)
    phase = math.pi * torch.rand(n_tasks, generator=generator)
    return amplitude, phase


def sample_points(amplitude: torch.Tensor, phase: torch.Tensor, k: int,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` points per task: inputs of shape (tasks, k, 1) and their targets."""
    x = 10.0 * torch.rand(amplitude.shape[0], k, 1, generator=generator) - 5.0
    y = amplitude[:, None, None] * torch.sin(x + phase[:, None, None])
    return x, y


def make_model() -> nn.Module:
    """The 1-40-40-1 ReLU network of the MAML paper."""
    return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(),
                         nn.Linear(40, 1))


def adapt(net: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> None:
    """``steps`` differentiable SGD steps of ``net`` on one task's support set."""
    inner_opt = diffopt.MetaSGD(net, lr=lr)
    for _ in range(steps):
        inner_opt.step(F.mse_loss(net(x), y))


def meta_test_loss(net: nn.Module, tasks: tuple[torch.Tensor, ...], steps: int,
                   lr: float) -> float:
    """Mean query MSE after adapting to each held-out task (no outer graph is kept)."""
    x_s, y_s, x_q, y_q = tasks
    saved = diffopt.extract_state_dict(net)
    total = 0.0
    for i in range(x_s.shape[0]):
        adapt(net, x_s[i], y_s[i], steps, lr)
        with torch.no_grad():
            total += F.mse_loss(net(x_q[i]), y_q[i]).item()
        diffopt.recover_state_dict(net, saved)
    return total / x_s.shape[0]


def progress_bar(iterable, no_progress: bool, **kwargs):
    """A tqdm bar on stderr, so stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise ImportError("the progress bar needs tqdm: pip install 'diffopt[examples]'") from error
    if no_progress or os.environ.get("NO_PROGRESS", "") not in ("", "0"):
        kwargs["disable"] = True  # never pass disable=False: it would override TQDM_DISABLE=1
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def print_summary(rows: list[tuple[str, str]]) -> None:
    """The key metrics as a markdown table."""
    print("\n| metric | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


def save_plot(path: Path, net: nn.Module, tasks, history, args) -> None:
    """Adapted predictions on three held-out tasks, and the meta-train/meta-test curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    amplitude, phase, x_s, y_s = tasks
    grid = torch.linspace(-5, 5, 200)[:, None]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    saved = diffopt.extract_state_dict(net)
    for i, ax in enumerate(axes[:3]):
        truth = amplitude[i] * torch.sin(grid + phase[i])
        with torch.no_grad():
            before = net(grid)
        adapt(net, x_s[i], y_s[i], args.test_inner_steps, args.inner_lr)
        with torch.no_grad():
            after = net(grid)
        diffopt.recover_state_dict(net, saved)
        ax.plot(grid, truth, "k-", label="ground truth")
        ax.plot(grid, before, "b:", label="meta-learned init")
        ax.plot(grid, after, "r--", label=f"after {args.test_inner_steps} SGD steps")
        ax.plot(x_s[i], y_s[i], "k^", label=f"{args.k} support points")
        ax.set_title(f"held-out task {i + 1}")
        ax.set_ylim(-5.5, 5.5)
    axes[0].legend(loc="lower left", fontsize=8)
    its, train_losses, test_losses = zip(*history)
    axes[3].plot(its, train_losses,
                 label=f"meta-train (query MSE after {args.inner_steps} step(s))")
    axes[3].plot(its, test_losses,
                 label=f"meta-test (held-out, after {args.test_inner_steps} steps)")
    axes[3].set_xlabel("outer iteration")
    axes[3].set_yscale("log")
    axes[3].legend()
    axes[3].set_title("MAML learning curves")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=5000, help="outer steps")
    parser.add_argument("--meta-batch", type=int, default=10, help="tasks per outer step")
    parser.add_argument("--k", type=int, default=10, help="support (and query) points per task")
    parser.add_argument("--inner-steps", type=int, default=1, help="SGD steps while training")
    parser.add_argument("--test-inner-steps", type=int, default=5,
                        help="SGD steps when adapting to held-out tasks")
    parser.add_argument("--inner-lr", type=float, default=0.01)
    parser.add_argument("--outer-lr", type=float, default=1e-3)
    parser.add_argument("--test-tasks", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=Path("out/maml_sinusoid.png"),
                        help="where to save the figure (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # tiny tensors: threading costs more than it saves
    generator = torch.Generator().manual_seed(args.seed)
    net = make_model()
    meta_opt = torch.optim.Adam(net.parameters(), lr=args.outer_lr)
    saved = diffopt.extract_state_dict(net)

    test_generator = torch.Generator().manual_seed(args.seed + 1)
    test_amp, test_phase = sample_tasks(args.test_tasks, test_generator)
    test_tasks = (*sample_points(test_amp, test_phase, args.k, test_generator),
                  *sample_points(test_amp, test_phase, args.k, test_generator))

    initial_test = meta_test_loss(net, test_tasks, args.test_inner_steps, args.inner_lr)
    initial_unadapted = meta_test_loss(net, test_tasks, 0, args.inner_lr)
    history = []
    running = first_train = None
    started = time.perf_counter()
    bar = progress_bar(range(1, args.iterations + 1), args.no_progress, desc="MAML sinusoid",
                       unit="it")
    test_loss = initial_test
    for it in bar:
        amplitude, phase = sample_tasks(args.meta_batch, generator)
        x_s, y_s = sample_points(amplitude, phase, args.k, generator)
        x_q, y_q = sample_points(amplitude, phase, args.k, generator)
        meta_opt.zero_grad()
        train_loss = 0.0
        for i in range(args.meta_batch):
            adapt(net, x_s[i], y_s[i], args.inner_steps, args.inner_lr)
            query_loss = F.mse_loss(net(x_q[i]), y_q[i]) / args.meta_batch
            query_loss.backward()  # accumulates the meta-gradient into the initialization
            train_loss += query_loss.item()
            diffopt.recover_state_dict(net, saved)
        meta_opt.step()
        running = train_loss if running is None else 0.95 * running + 0.05 * train_loss
        first_train = train_loss if first_train is None else first_train
        if it % args.eval_every == 0 or it == args.iterations:
            test_loss = meta_test_loss(net, test_tasks, args.test_inner_steps, args.inner_lr)
            history.append((it, running, test_loss))
        bar.set_postfix(refresh=False, meta_train=f"{running:.3f}", meta_test=f"{test_loss:.3f}")
    bar.close()
    elapsed = time.perf_counter() - started
    unadapted = meta_test_loss(net, test_tasks, 0, args.inner_lr)

    print_summary([
        (f"meta-train query MSE after {args.inner_steps} SGD step(s), first batch -> last "
         "(running mean)",
         f"{first_train:.3f} -> {running:.3f}"),
        (f"meta-test query MSE, {args.test_tasks} held-out tasks, no adaptation",
         f"{initial_unadapted:.3f} (random init) -> {unadapted:.3f} (meta-learned init)"),
        (f"meta-test query MSE after {args.test_inner_steps} SGD steps",
         f"{initial_test:.3f} (random init) -> {test_loss:.3f} (meta-learned init)"),
        ("outer steps, wall time", f"{args.iterations} in {elapsed:.1f} s "
         f"({args.iterations / elapsed:.0f} it/s)"),
    ])
    plot_tasks = (test_amp, test_phase, test_tasks[0], test_tasks[1])
    save_plot(args.plot, net, plot_tasks, history, args)
    print(f"saved plot of adapted sinusoids and learning curves to {args.plot.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
