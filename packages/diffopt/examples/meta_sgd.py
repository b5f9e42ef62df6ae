#!/usr/bin/env python3
"""Meta-SGD (Li et al., 2017, arXiv:1707.09835): MAML that also learns per-parameter inner rates.

MAML adapts an initialization ``theta`` to a task by SGD with one fixed rate; Meta-SGD adapts by
``theta' = theta - alpha * grad L_support(theta)`` where ``alpha`` has the shape of ``theta`` (one
rate per weight, and a direction too, since entries may turn negative), and learns ``alpha`` with
``theta`` by back-propagating the query loss through the adaptation.

With diffopt the inner optimizer is a :func:`diffopt.multi_transform` that gives each parameter
its own :func:`diffopt.inject_hyperparams` SGD whose ``lr`` is that parameter's ``alpha`` (a tensor
of its shape that requires grad); the inner update runs out of place, so the outer Adam step
reaches both ``theta`` and ``alpha``. The tasks are MAML's sinusoids (see ``maml_sinusoid.py``).

    python packages/diffopt/examples/meta_sgd.py [--iterations 2000] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.func import functional_call

import diffopt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from maml_sinusoid import make_model, sample_points, sample_tasks


def inner_optimizer(alphas: dict[str, torch.Tensor]) -> diffopt.GradientTransformation:
    """SGD with the learned rate ``alphas[name]`` (shaped like the parameter) for each parameter."""
    return diffopt.multi_transform(
        {name: diffopt.inject_hyperparams(diffopt.sgd)(lr=alpha) for name, alpha in alphas.items()},
        {name: name for name in alphas},
    )


def adapt(
    net: torch.nn.Module,
    params: dict,
    alphas: dict | None,
    lr: float,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int,
) -> dict:
    """``steps`` differentiable SGD steps on a support set: learned rates, or ``lr`` (MAML)."""
    tx = inner_optimizer(alphas) if alphas is not None else diffopt.sgd(lr=lr)
    state = tx.init(params)
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(functional_call(net, params, (x,)), y)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
        updates, state = tx.update(dict(zip(params, grads)), state, params=params, inplace=False)
        params = diffopt.apply_updates(params, updates, inplace=False)
    return params


def meta_test_loss(net, params, alphas, lr, k, steps, generator, tasks=100) -> float:
    """Query MSE after adaptation, averaged over held-out tasks."""
    amplitude, phase = sample_tasks(tasks, generator)
    xs, ys = sample_points(amplitude, phase, k, generator)
    xq, yq = sample_points(amplitude, phase, k, generator)
    total = 0.0
    for i in range(tasks):
        adapted = adapt(net, params, alphas, lr, xs[i], ys[i], steps)
        query = functional_call(net, adapted, (xq[i],))
        total += float(torch.nn.functional.mse_loss(query, yq[i]).detach())
    return total / tasks


def train(
    iterations: int = 2000,
    meta_batch: int = 10,
    k: int = 10,
    steps: int = 1,
    lr: float = 0.01,
    meta_lr: float = 1e-3,
    learn_rates: bool = True,
    seed: int = 0,
    test_tasks: int = 100,
) -> dict:
    """Meta-train a sinusoid regressor with Meta-SGD (``learn_rates``) or MAML.

    Args:
        iterations: outer steps.
        meta_batch: tasks per outer step.
        k: support (and query) points per task.
        steps: inner SGD steps.
        lr: MAML's inner rate, and the initial value of every learned rate.
        meta_lr: the outer Adam's rate.
        learn_rates: learn per-parameter rates (Meta-SGD) or keep ``lr`` fixed (MAML).
        seed: seeds the model and the tasks.
        test_tasks: held-out tasks for the meta-test loss.

    Returns:
        A dict with the meta-test loss ``before`` and ``after`` training and, for Meta-SGD, the
        learned ``alphas``.
    """
    torch.manual_seed(seed)
    net = make_model()
    params = {name: p.detach().clone().requires_grad_() for name, p in net.named_parameters()}
    alphas = (
        {name: torch.full_like(p, lr, requires_grad=True) for name, p in params.items()}
        if learn_rates
        else None
    )
    outer = torch.optim.Adam([*params.values(), *(alphas or {}).values()], lr=meta_lr)
    train_gen = torch.Generator().manual_seed(seed + 1)

    def evaluate() -> float:
        return meta_test_loss(
            net, params, alphas, lr, k, steps, torch.Generator().manual_seed(99), test_tasks
        )

    before = evaluate()
    for _ in range(iterations):
        amplitude, phase = sample_tasks(meta_batch, train_gen)
        xs, ys = sample_points(amplitude, phase, k, train_gen)
        xq, yq = sample_points(amplitude, phase, k, train_gen)
        outer.zero_grad()
        loss = 0.0
        for i in range(meta_batch):
            adapted = adapt(net, params, alphas, lr, xs[i], ys[i], steps)
            loss = loss + torch.nn.functional.mse_loss(
                functional_call(net, adapted, (xq[i],)), yq[i]
            )
        (loss / meta_batch).backward()
        outer.step()
    after = evaluate()
    return {
        "before": before,
        "after": after,
        "alphas": None if alphas is None else {n: a.detach() for n, a in alphas.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--meta-lr", type=float, default=1e-3, help="the outer Adam's rate")
    parser.add_argument("--quick", action="store_true", help="a few iterations (for tests)")
    args = parser.parse_args(argv)
    iterations = 30 if args.quick else args.iterations
    meta_lr = 1e-2 if args.quick else args.meta_lr
    maml = train(iterations, meta_lr=meta_lr, learn_rates=False)
    meta_sgd = train(iterations, meta_lr=meta_lr, learn_rates=True)
    print(f"meta-test query MSE after one inner step, {iterations} outer steps")
    print(f"  MAML      {maml['before']:.3f} -> {maml['after']:.3f}")
    print(f"  Meta-SGD  {meta_sgd['before']:.3f} -> {meta_sgd['after']:.3f}")
    rates = torch.cat([a.flatten() for a in meta_sgd["alphas"].values()])
    print(
        f"  learned rates: mean {float(rates.mean()):.4f}, min {float(rates.min()):.4f}, "
        f"max {float(rates.max()):.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
