"""Evolution strategies on a non-differentiable objective with zero-order gradients.

A small classifier is trained to maximize its *accuracy* (an argmax count: autograd gives zero
gradients everywhere) with *quantized* weights (``torch.round`` to a grid of 1/8), on generated
2-D data (a disc inside a ring). :func:`diffopt.diff.zero_order.zero_order` turns that
objective into one whose gradient is the evolution-strategies estimate of the gradient of its
Gaussian smoothing, so an ordinary :class:`torch.optim.Adam` can follow it. The script then
compares the three estimators (``naive``, ``forward``, ``antithetic``) on the same budget of
objective evaluations.

Run: ``python packages/diffopt/examples/es_nondifferentiable.py`` (well under a minute on a CPU).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import diffopt as torchopt  # a drop-in for TorchOpt's API

HIDDEN = 16


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


def train(method: str, args, x, labels, x_test, labels_test, verbose: bool) -> float:
    torch.manual_seed(args.seed)
    num_params = 2 * HIDDEN + HIDDEN + HIDDEN * HIDDEN + HIDDEN + 2 * HIDDEN + 2
    theta = (0.5 * torch.randn(num_params)).requires_grad_()
    # Antithetic pairs cost two evaluations per draw: give every method the same budget.
    samples = args.evaluations // 2 if method == "antithetic" else args.evaluations

    @torchopt.diff.zero_order(
        torch.distributions.Normal(0.0, 1.0), method=method, num_samples=samples, sigma=args.sigma
    )
    def error_rate(theta, x, labels):
        return 1.0 - accuracy(theta, x, labels)

    optimizer = torch.optim.Adam([theta], lr=args.lr)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = error_rate(theta, x, labels)
        loss.backward()
        optimizer.step()
        if verbose and (step % 25 == 0 or step == 1):
            print(
                f"  [{method:>10s} {step:4d}/{args.steps}] {time.perf_counter() - start:5.1f}s "
                f"train accuracy {1 - loss.item():.3f}  test accuracy "
                f"{accuracy(theta.detach(), x_test, labels_test):.3f}",
                flush=True,
            )
    return accuracy(theta.detach(), x_test, labels_test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--evaluations", type=int, default=40, help="objective calls per step")
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
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
    results = {}
    for method in ("antithetic", "forward", "naive"):
        results[method] = train(
            method, args, x, labels, x_test, labels_test, verbose=method == "antithetic"
        )
    print("final test accuracy with the same evaluation budget:")
    for method, value in results.items():
        print(f"  {method:>10s}: {value:.3f}")
    print(
        "('naive' weights each draw by the error rate itself, about 0.5 here, so its estimate is\n"
        " dominated by noise of size f/sigma; 'forward' and 'antithetic' weight by differences.)"
    )


if __name__ == "__main__":
    main()
