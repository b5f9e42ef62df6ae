"""Evolution strategies on a non-differentiable objective with zero-order gradients.

A small classifier is trained to maximize its *accuracy* (an argmax count: autograd gives zero
gradients everywhere) with *quantized* weights (``torch.round`` to a grid of 1/8), on generated
2-D data (a disc inside a ring). :func:`diffopt.diff.zero_order.zero_order` turns that
objective into one whose gradient is the evolution-strategies estimate of the gradient of its
Gaussian smoothing, so an ordinary :class:`torch.optim.Adam` can follow it. The script then
compares the three estimators (``naive``, ``forward``, ``antithetic``) on the same budget of
objective evaluations.

Run: ``python packages/diffopt/examples/es_nondifferentiable.py`` (well under a minute on a CPU).
A progress bar per estimator (on stderr; ``--no-progress``, ``NO_PROGRESS=1`` or
``TQDM_DISABLE=1`` hides it) follows the training, and a summary table compares the estimators.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

import diffopt as torchopt  # a drop-in for TorchOpt's API

HIDDEN = 16
NUM_PARAMS = 2 * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + 2 * HIDDEN + 2


def disc_and_ring(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, 2, (n,), generator=generator)
    radius = torch.where(labels == 1, 0.5, 1.0) * torch.rand(n, generator=generator).sqrt()
    radius = radius + labels.eq(0) * 0.6  # class 0: a ring from 0.6 to 1.6
    angle = 2 * math.pi * torch.rand(n, generator=generator)
    x = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return x + 0.05 * torch.randn(n, 2, generator=generator), labels


def unflatten(theta: torch.Tensor) -> tuple[torch.Tensor, ...]:
    sizes = [2 * HIDDEN, HIDDEN, HIDDEN * HIDDEN, HIDDEN, 2 * HIDDEN, 2]
    w1, b1, w2, b2, w3, b3 = torch.split(theta, sizes)
    return (w1.view(HIDDEN, 2), b1, w2.view(HIDDEN, HIDDEN), b2, w3.view(2, HIDDEN), b3)


def accuracy(theta: torch.Tensor, x: torch.Tensor, labels: torch.Tensor) -> float:
    w1, b1, w2, b2, w3, b3 = (torch.round(8 * p) / 8 for p in unflatten(theta))  # quantized
    h = torch.tanh(x @ w1.T + b1)
    h = torch.tanh(h @ w2.T + b2)
    predictions = (h @ w3.T + b3).argmax(dim=1)
    return (predictions == labels).float().mean().item()  # a Python float: no graph at all


def progress_bar(iterable, no_progress: bool, **kwargs):
    """A tqdm bar on stderr, so stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise ImportError("the progress bar needs tqdm: pip install 'diffopt[examples]'") from error
    if no_progress or os.environ.get("NO_PROGRESS", "") not in ("", "0"):
        kwargs["disable"] = True  # never pass disable=False: it would override TQDM_DISABLE=1
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def train(method: str, args, x, labels, x_test, labels_test,
          verbose: bool) -> tuple[float, float, float]:
    """Train with one estimator; returns the final train and test accuracy and the seconds."""
    torch.manual_seed(args.seed)
    theta = (0.5 * torch.randn(NUM_PARAMS)).requires_grad_()
    # Antithetic pairs cost two evaluations per draw: give every method the same budget.
    samples = args.evaluations // 2 if method == "antithetic" else args.evaluations

    @torchopt.diff.zero_order(
        torch.distributions.Normal(0.0, 1.0), method=method, num_samples=samples, sigma=args.sigma
    )
    def error_rate(theta, x, labels):
        return 1.0 - accuracy(theta, x, labels)

    optimizer = torch.optim.Adam([theta], lr=args.lr)
    start = time.perf_counter()
    bar = progress_bar(range(1, args.steps + 1), args.no_progress, desc=f"ES {method:>10s}",
                       unit="step")
    for step in bar:
        optimizer.zero_grad()
        loss = error_rate(theta, x, labels)
        loss.backward()
        optimizer.step()
        bar.set_postfix(refresh=False, train_accuracy=f"{1 - loss.item():.3f}")
        if verbose and (step % 25 == 0 or step == 1):
            bar.write(
                f"  [{method:>10s} {step:4d}/{args.steps}] {time.perf_counter() - start:5.1f}s "
                f"train accuracy {1 - loss.item():.3f}  test accuracy "
                f"{accuracy(theta.detach(), x_test, labels_test):.3f}"
            )
    bar.close()
    elapsed = time.perf_counter() - start
    return (accuracy(theta.detach(), x, labels), accuracy(theta.detach(), x_test, labels_test),
            elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--evaluations", type=int, default=40, help="objective calls per step")
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny tensors: threading overhead would dominate

    generator = torch.Generator().manual_seed(args.seed)
    x, labels = disc_and_ring(400, generator)
    x_test, labels_test = disc_and_ring(1000, generator)
    print("the objective is an argmax count over a rounded network, returned as a Python float:")
    print("autograd has nothing to differentiate, so the gradient comes from ES estimates.")
    print(
        f"ES with {args.evaluations} objective evaluations per step, sigma={args.sigma}, "
        f"Adam lr={args.lr}, {args.steps} steps:"
    )
    torch.manual_seed(args.seed)  # the initialization every run starts from (as in train)
    initial = accuracy(0.5 * torch.randn(NUM_PARAMS), x_test, labels_test)
    results = {}
    for method in ("antithetic", "forward", "naive"):
        results[method] = train(
            method, args, x, labels, x_test, labels_test, verbose=method == "antithetic"
        )
    print(f"\nfinal accuracy with the same budget of {args.evaluations} evaluations per step "
          f"(the initialization: {initial:.3f} on the test set):\n")
    print("| estimator | train accuracy | test accuracy | wall time |")
    print("|---|---:|---:|---:|")
    for method, (train_accuracy, test_accuracy, seconds) in results.items():
        print(f"| {method} | {train_accuracy:.3f} | {test_accuracy:.3f} | {seconds:.1f} s |")
    print(
        "('naive' weights each draw by the error rate itself, about 0.5 here, so its estimate is\n"
        " dominated by noise of size f/sigma; 'forward' and 'antithetic' weight by differences.)"
    )


if __name__ == "__main__":
    main()
