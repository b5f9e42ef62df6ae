#!/usr/bin/env python3
"""MAML on sinusoid regression with the task batch vmapped (torch.func), any diffopt optimizer inside.

The same problem as ``maml_sinusoid.py`` (Finn et al., 2017, sec. 5.1), written the torch.func
way: the inner loop is a pure function of the shared initialization and one task's data,

    state = tx.init(params)
    for each inner step:
        grads = torch.func.grad(loss)(params, x_support, y_support)
        updates, state = tx.update(grads, state, params=params, inplace=False)
        params = diffopt.apply_updates(params, updates, inplace=False)
    return loss(params, x_query, y_query)

and ``torch.func.vmap`` runs it over the whole meta-batch of tasks at once, the initialization
shared (``in_dims=None``). The outer loss is the sum over tasks; an ordinary ``backward`` through
the vmapped inner loops gives the meta-gradient, and a ``diffopt.Adam`` takes the outer step.
Any functional optimizer works as the inner one (``--inner sgd|adam|rmsprop|...``): their state,
step counts included, is made of tensors, so vmap batches it like everything else.

    python packages/diffopt/examples/maml_vmap.py [--inner adam] [--iterations 2000]

It prints the meta-test loss (query MSE after adaptation, on held-out tasks) before and after
meta-training. ``benchmarks/func/bench_func.py`` times the vmapped and looped forms.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

import diffopt

INNER = {
    "sgd": lambda: diffopt.sgd(0.01),
    "sgd-momentum": lambda: diffopt.sgd(0.01, momentum=0.9),
    "adam": lambda: diffopt.adam(0.03),
    "adamw": lambda: diffopt.adamw(0.03, weight_decay=0.01),
    "rmsprop": lambda: diffopt.rmsprop(0.003),
    "adagrad": lambda: diffopt.adagrad(0.1),
    "radam": lambda: diffopt.radam(0.03),
}


def sample_tasks(n_tasks: int, shots: int, generator: torch.Generator):
    """Support and query sets of ``n_tasks`` random sinusoids: four ``[n_tasks, shots, 1]``."""
    amplitude = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=generator)
    phase = math.pi * torch.rand(n_tasks, 1, 1, generator=generator)
    xs = 10 * torch.rand(n_tasks, shots, 1, generator=generator) - 5
    xq = 10 * torch.rand(n_tasks, shots, 1, generator=generator) - 5
    return xs, amplitude * torch.sin(xs + phase), xq, amplitude * torch.sin(xq + phase)


def make_net() -> nn.Module:
    return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(),
                         nn.Linear(40, 1))


def make_meta_loss(net: nn.Module, tx: diffopt.GradientTransformation, inner_steps: int):
    """``params, tasks -> per-task query losses``, the inner loops vmapped over the tasks."""

    def loss(params, x, y):
        return F.mse_loss(functional_call(net, params, (x,)), y)

    def adapted_query_loss(params, xs, ys, xq, yq):
        state = tx.init(params)
        for _ in range(inner_steps):
            grads = grad(loss)(params, xs, ys)
            updates, state = tx.update(grads, state, params=params, inplace=False)
            params = diffopt.apply_updates(params, updates, inplace=False)
        return loss(params, xq, yq)

    return vmap(adapted_query_loss, in_dims=(None, 0, 0, 0, 0))


def train(inner: str = "adam", iterations: int = 2000, meta_batch: int = 25, shots: int = 10,
          inner_steps: int = 3, seed: int = 0) -> tuple[float, float]:
    """Meta-train; returns the meta-test loss before and after."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    net = make_net()
    params = dict(net.named_parameters())  # leaves: the meta-parameters
    meta_loss = make_meta_loss(net, INNER[inner](), inner_steps)
    outer = diffopt.Adam(params.values(), lr=1e-3)
    test_tasks = sample_tasks(100, shots, torch.Generator().manual_seed(seed + 1))

    def meta_test() -> float:
        return float(meta_loss(params, *test_tasks).detach().mean())

    before = meta_test()
    for _ in range(iterations):
        outer.zero_grad()
        meta_loss(params, *sample_tasks(meta_batch, shots, generator)).mean().backward()
        outer.step()
    return before, meta_test()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", choices=sorted(INNER), default="adam")
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--meta-batch", type=int, default=25)
    parser.add_argument("--inner-steps", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    before, after = train(args.inner, args.iterations, args.meta_batch,
                          inner_steps=args.inner_steps)
    print(f"inner {args.inner}, {args.iterations} outer steps of {args.meta_batch} vmapped tasks "
          f"in {time.perf_counter() - start:.1f} s")
    print(f"meta-test loss (query MSE after {args.inner_steps} inner steps): "
          f"{before:.3f} before meta-training, {after:.3f} after")


if __name__ == "__main__":
    main()
