#!/usr/bin/env python3
"""Train an ensemble of N small models at once: torch.func.vmap for the gradients, one fused update.

Each of ``--models`` MLP classifiers learns the two-spirals problem from its own bootstrap
resample of the data (so the members differ, as an ensemble should). The parameters of all
members are stacked into one pytree of ``[N, ...]`` tensors (``torch.func.stack_module_state``),
and every training step is

1. ``vmap(grad(loss))`` over the members: N per-member gradients in one batched call;
2. ONE ``update`` of the whole stack by diffopt's Adam, in place, through fused-optim's fused
   kernel (``use_accelerated_op=True``). Adam is elementwise, so updating the stacked tensors is
   exactly the N separate updates: no Python loop over the members anywhere.

``--vmap-step`` instead vmaps the whole step (gradient, ``update(..., inplace=False)``,
``apply_updates``) over the members, with the optimizer state initialized under ``vmap`` too (its
step counts are then batched, one per member): the form to use when the members' optimizers
should differ per member or the update is not elementwise.

    python packages/diffopt/examples/ensemble_vmap.py [--models 32] [--steps 500] [--vmap-step]

It prints each member's training loss and the accuracy of the members and of their averaged
prediction on fresh test points. ``benchmarks/func/bench_func.py`` times both forms against a
Python loop over the members.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

import diffopt


def spirals(n: int, generator: torch.Generator, noise: float = 0.05):
    """Two interleaved spirals: ``n`` points in 2-D and their 0/1 labels."""
    t = torch.rand(n, generator=generator)
    r = t.sqrt()
    sign = torch.randint(0, 2, (n,), generator=generator) * 2 - 1
    theta = r * 2 * math.pi
    points = torch.stack([r * sign * torch.cos(theta), r * sign * torch.sin(theta)], 1)
    return points + noise * torch.randn(n, 2, generator=generator), (sign > 0).long()


def make_member(hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 2))


def train(models: int = 32, steps: int = 500, lr: float = 0.02, vmap_step: bool = False,
          seed: int = 0) -> dict:
    """Train the ensemble; returns the members' final losses and test accuracies."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    x, y = spirals(256, generator)
    # One bootstrap resample of the training set per member: [N, 256] indices.
    resample = torch.randint(0, len(x), (models, len(x)), generator=generator)
    xs, ys = x[resample], y[resample]

    params, _ = stack_module_state([make_member() for _ in range(models)])
    params = {name: p.detach() for name, p in params.items()}
    skeleton = make_member().to("meta")  # shapes only: functional_call supplies the tensors

    def loss(params, x, y):
        return F.cross_entropy(functional_call(skeleton, params, (x,)), y)

    if vmap_step:
        tx = diffopt.adam(lr)

        def step(params, state, x, y):
            grads, value = torch.func.grad_and_value(loss)(params, x, y)
            updates, state = tx.update(grads, state, inplace=False)
            return diffopt.apply_updates(params, updates, inplace=False), state, value

        state = vmap(tx.init)(params)
        batched_step = vmap(step)
        for _ in range(steps):
            params, state, losses = batched_step(params, state, xs, ys)
    else:
        tx = diffopt.adam(lr, use_accelerated_op=diffopt.accelerated_op_available("cpu"))
        state = tx.init(params)  # the stacked tree: one state for all members
        grads_and_losses = vmap(torch.func.grad_and_value(loss))
        for _ in range(steps):
            grads, losses = grads_and_losses(params, xs, ys)
            updates, state = tx.update(grads, state, inplace=True)
            diffopt.apply_updates(params, updates, inplace=True)

    x_test, y_test = spirals(1000, generator)
    logits = vmap(functional_call, in_dims=(None, 0, None))(skeleton, params, (x_test,))
    member_accuracy = (logits.argmax(-1) == y_test).float().mean(-1)
    ensemble_accuracy = (logits.softmax(-1).mean(0).argmax(-1) == y_test).float().mean()
    return {"losses": losses, "member_accuracy": member_accuracy,
            "ensemble_accuracy": float(ensemble_accuracy)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=32)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--vmap-step", action="store_true",
                        help="vmap the whole step, update included, over the members")
    args = parser.parse_args()
    start = time.perf_counter()
    result = train(args.models, args.steps, args.lr, args.vmap_step)
    seconds = time.perf_counter() - start
    form = "vmapped step" if args.vmap_step else "vmapped gradients + one fused update"
    print(f"{args.models} members, {args.steps} steps ({form}) in {seconds:.1f} s")
    print(f"final training loss: mean {result['losses'].mean():.4f}, "
          f"range [{result['losses'].min():.4f}, {result['losses'].max():.4f}]")
    accuracy = result["member_accuracy"]
    print(f"test accuracy: members {accuracy.mean():.3f} (range {accuracy.min():.3f}-"
          f"{accuracy.max():.3f}), averaged ensemble {result['ensemble_accuracy']:.3f}")


if __name__ == "__main__":
    main()
