"""A deep-equilibrium (DEQ) layer trained by implicit differentiation, against unrolled backprop.

The layer's output is the fixed point of one cell applied to its own output (Bai et al., 2019),

    z* = f(z*, params, injection),   f(z, params, inj) = tanh(z W^T + inj),

with ``inj = U x + b`` computed from the input by an ordinary linear layer and ``W`` rescaled so
that its Frobenius norm is at most 0.9: ``f`` is then a contraction in ``z`` (tanh is
1-Lipschitz), so the fixed point exists, is unique and every solver finds it. A linear head
classifies ``z*``. The task is a synthetic three-arm spiral in the plane.

Two ways to train the same model:

* implicit: the forward pass finds ``z*`` with ``diffopt.fixed_point.solve`` (Anderson
  acceleration, no autograd graph) inside a solver decorated with
  ``diffopt.implicit.custom_fixed_point``; the backward pass solves
  ``(I - df/dz)^T u = dL/dz*`` by GMRES on vector-Jacobian products of one cell at ``z*``.
* unrolled: the cell is applied ``--unroll`` times from zero and autograd back-propagates
  through every application.

It prints a table: test accuracy, training time, the forward iterations and the memory autograd
keeps for the backward pass of one batch (the bytes of the distinct tensors saved by the forward
pass, counted with ``torch.autograd.graph.saved_tensors_hooks``; it grows with the unrolled
steps and stays flat for the implicit layer).

    python packages/diffopt/examples/deq.py [--quick] [--steps 400] [--unroll 30]

``--quick`` (a few seconds) is what the test suite runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import diffopt

CLASSES = 3
QUICK = {"steps": 80, "n_train": 600, "n_test": 400}  # --quick, and the test suite's run


def spirals(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` noisy points on three interleaved spiral arms, and their arm labels."""
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    radius = torch.rand(n, generator=generator)
    angle = 3.0 * radius + 2 * torch.pi * labels / CLASSES
    angle = angle + 0.2 * torch.randn(n, generator=generator)
    x = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return 2.0 * x, labels


def cell(z: torch.Tensor, params: dict[str, torch.Tensor], injection: torch.Tensor) -> torch.Tensor:
    """One application of the equilibrium cell: a contraction in ``z``."""
    w = params["W"]
    w = w * torch.clamp(0.9 / torch.linalg.matrix_norm(w), max=1.0)
    return torch.tanh(z @ w.T + injection)


class DEQClassifier(nn.Module):
    """Input injection, the equilibrium cell, and a linear head."""

    def __init__(self, hidden: int, mode: str, unroll: int, tol: float) -> None:
        super().__init__()
        self.inject = nn.Linear(2, hidden)
        self.W = nn.Parameter(torch.randn(hidden, hidden) / hidden)
        self.head = nn.Linear(hidden, CLASSES)
        self.mode, self.unroll, self.tol = mode, unroll, tol
        self.iterations: list[int] = []
        backward_solve = diffopt.linear_solve.solve_gmres(rtol=1e-6, maxiter=100)
        self.equilibrium: Callable[..., Any] = diffopt.implicit.custom_fixed_point(
            cell, argnums=(1, 2), solve=backward_solve
        )(self._solve)

    def _solve(self, z0: torch.Tensor, params: dict[str, torch.Tensor],
               injection: torch.Tensor) -> torch.Tensor:
        result = diffopt.fixed_point.solve(cell, z0, params, injection, method="anderson",
                                           tol=0.0, rtol=self.tol, max_iter=100)
        self.iterations.append(result.iterations)
        return result.value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        injection = self.inject(x)
        z = torch.zeros_like(injection)
        params = {"W": self.W}
        if self.mode == "implicit":
            z = self.equilibrium(z, params, injection)
        else:
            for _ in range(self.unroll):
                z = cell(z, params, injection)
        return self.head(z)


def saved_bytes(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes of the distinct tensors autograd saves for backward in one forward pass."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    model.zero_grad()
    return sum(storages.values())


def train(mode: str, *, steps: int = 400, hidden: int = 32, unroll: int = 30, batch: int = 128,
          n_train: int = 2000, n_test: int = 1000, lr: float = 1e-2, tol: float = 1e-4,
          seed: int = 0) -> dict[str, float]:
    """Train one model (``mode`` is ``"implicit"`` or ``"unrolled"``); return its measurements."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    x_train, y_train = spirals(n_train, generator)
    x_test, y_test = spirals(n_test, generator)
    model = DEQClassifier(hidden, mode, unroll, tol)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    memory = saved_bytes(model, x_train[:batch], y_train[:batch])
    model.iterations.clear()
    started = time.perf_counter()
    for _ in range(steps):
        index = torch.randint(0, n_train, (batch,), generator=generator)
        loss = F.cross_entropy(model(x_train[index]), y_train[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - started
    iterations = sum(model.iterations) / len(model.iterations) if model.iterations else unroll
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
    return {"accuracy": accuracy, "seconds": seconds, "memory_kib": memory / 1024,
            "iterations": float(iterations), "final_loss": float(loss.detach())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few-second run (the tests')")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--unroll", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (the ops are small: more threads mostly add overhead)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options = {"steps": args.steps, "unroll": args.unroll, "hidden": args.hidden, "seed": args.seed}
    if args.quick:
        options.update(QUICK)
    rows = {mode: train(mode, **options) for mode in ("implicit", "unrolled")}
    print(f"DEQ on 3-arm spirals: {options['steps']} Adam steps, hidden {args.hidden}, "
          f"unrolled baseline {args.unroll} cell applications")
    print("| training | test accuracy | time (s) | forward iterations | backward memory (KiB) |")
    print("|---|---|---|---|---|")
    for mode, row in rows.items():
        print(f"| {mode} | {row['accuracy']:.3f} | {row['seconds']:.1f} | "
              f"{row['iterations']:.1f} | {row['memory_kib']:.0f} |")


if __name__ == "__main__":
    main()
