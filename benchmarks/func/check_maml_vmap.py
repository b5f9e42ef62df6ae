#!/usr/bin/env python3
"""The task-batched MAML check: does each optimizer work under ``torch.func.vmap`` over tasks?

For each of ten optimizers, MAML as a ``torch.func`` user writes it: parameters shared by a batch
of tasks, ``vmap`` over the tasks around a 3-step inner loop (``init -> torch.func.grad ->
update(..., inplace=False) -> apply_updates``), then an ordinary outer ``backward``. The losses
and meta-gradient are compared, in float64, with the same function called one task at a time.
An optimizer passes when the vmapped run finishes and agrees with the loop to 1e-9 (relative to
the largest entry), every entry finite.

The same code runs against each library through its own import (TorchOpt's functional API is
the one diffopt mirrors); a library that is not installed is skipped with a note.

    python benchmarks/func/check_maml_vmap.py [--libraries diffopt torchopt] [--tasks 8]
"""

from __future__ import annotations

import argparse
import importlib

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

OPTIMIZERS = {
    "sgd": lambda lib: lib.sgd(0.1),
    "sgd+momentum": lambda lib: lib.sgd(0.1, momentum=0.9),
    "adam": lambda lib: lib.adam(0.02),
    "adam+accelerated": lambda lib: lib.adam(0.02, use_accelerated_op=True),
    "adamw": lambda lib: lib.adamw(0.02, weight_decay=0.1),
    "rmsprop": lambda lib: lib.rmsprop(0.01),
    "adagrad": lambda lib: lib.adagrad(0.1),
    "adadelta": lambda lib: lib.adadelta(1.0),
    "adamax": lambda lib: lib.adamax(0.02),
    "radam": lambda lib: lib.radam(0.02),
}


def make_problem(tasks: int, seed: int = 0):
    """A 1-40-40-1 tanh MLP (tanh: no dead units, so no library is judged on NaN at zero
    gradients) and sinusoid regression tasks, float64."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(1, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh(),
                        nn.Linear(40, 1)).double()
    g = torch.Generator().manual_seed(seed + 1)
    amplitude = 0.1 + 4.9 * torch.rand(tasks, 1, 1, generator=g, dtype=torch.float64)
    phase = 3.14159 * torch.rand(tasks, 1, 1, generator=g, dtype=torch.float64)
    xs = 10 * torch.rand(tasks, 10, 1, generator=g, dtype=torch.float64) - 5
    xq = 10 * torch.rand(tasks, 10, 1, generator=g, dtype=torch.float64) - 5
    data = (xs, amplitude * torch.sin(xs + phase), xq, amplitude * torch.sin(xq + phase))
    return net, data


def task_loss_fn(lib, tx, net, steps: int):
    def loss(params, x, y):
        return F.mse_loss(functional_call(net, params, (x,)), y)

    def task_loss(params, xs, ys, xq, yq):
        state = tx.init(params)
        for _ in range(steps):
            grads = grad(loss)(params, xs, ys)
            updates, state = tx.update(grads, state, params=params, inplace=False)
            params = lib.apply_updates(params, updates, inplace=False)
        return loss(params, xq, yq)

    return task_loss


def check(lib, name: str, tasks: int, steps: int) -> tuple[bool, str]:
    net, data = make_problem(tasks)
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    try:
        task_loss = task_loss_fn(lib, OPTIMIZERS[name](lib), net, steps)
        losses = vmap(task_loss, in_dims=(None, 0, 0, 0, 0))(params, *data)
        meta = torch.autograd.grad(losses.sum(), list(params.values()))
    except Exception as error:  # the point is to report what breaks, whatever it is
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return False, f"{type(error).__name__}: {message[:70]}"
    task_loss = task_loss_fn(lib, OPTIMIZERS[name](lib), net, steps)
    looped = torch.stack([task_loss(params, *task) for task in zip(*data)])
    ref = torch.autograd.grad(looped.sum(), list(params.values()))
    got = torch.cat([losses.detach()] + [g.reshape(-1) for g in meta])
    want = torch.cat([looped.detach()] + [g.reshape(-1) for g in ref])
    if not torch.isfinite(got).all():
        return False, "non-finite losses or meta-gradient"
    error = float((got - want).abs().max() / want.abs().max())
    return error <= 1e-9, f"rel. err {error:.0e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", nargs="+", default=["diffopt", "torchopt"])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    for library in args.libraries:
        try:
            lib = importlib.import_module(library)
        except ImportError:
            print(f"({library} is not installed: skipped)")
            continue
        results[library] = {name: check(lib, name, args.tasks, args.steps) for name in OPTIMIZERS}
    print(f"\nTask-batched MAML under torch.func.vmap ({args.tasks} tasks, {args.steps} inner "
          "steps, float64), vmapped vs per-task loop:\n")
    print("| optimizer | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for name in OPTIMIZERS:
        cells = [("pass" if ok else "FAIL") + f" ({note})" for ok, note in
                 (results[library][name] for library in results)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| **passed** | " + " | ".join(
        f"**{sum(ok for ok, _ in results[library].values())} of {len(OPTIMIZERS)}**"
        for library in results) + " |")


if __name__ == "__main__":
    main()
