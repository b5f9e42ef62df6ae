#!/usr/bin/env python3
"""Online hyper-gradient descent of the learning rate (Baydin et al., 2018, arXiv:1703.04782).

Adam-HD learns Adam's learning rate while it trains: after each step the rate moves against the
derivative of the current loss with respect to the rate used in the previous step,

    alpha_t = alpha_{t-1} - beta * dL(theta_t)/d alpha_{t-1} = alpha_{t-1} + beta * g_t . u_{t-1},

where ``u_{t-1}`` is Adam's direction of that step (the paper's rule, which treats the direction
as independent of the rate). With diffopt the derivative comes from autograd: the rate is a tensor
that requires grad, injected into Adam's state by :func:`diffopt.inject_hyperparams`, and each
update runs out of place, so the next loss is a function of the rate through one step.

The script trains a logistic regression on synthetic data with Adam and with Adam-HD, both
starting from a rate ten times too small, and prints both training losses and the learned rate.

    python packages/diffopt/examples/hypergradient_descent.py [--steps 600] [--quick]
"""

from __future__ import annotations

import argparse
import sys

import torch

import diffopt


def make_data(n: int = 512, d: int = 20, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A linearly separable-ish binary classification problem: features and 0/1 labels."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, generator=g) > 0).to(x.dtype)
    return x, y


def loss_fn(params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of the logistic model ``x @ w + b``."""
    logits = x @ params["w"] + params["b"]
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, y)


def train(
    steps: int = 600,
    lr: float = 1e-3,
    beta: float = 1e-3,
    hypergradient: bool = True,
    batch: int = 64,
    seed: int = 0,
) -> dict:
    """Train with Adam (``hypergradient=False``) or Adam-HD on mini-batches.

    Args:
        steps: the number of Adam steps.
        lr: the initial learning rate.
        beta: the hyper-learning rate of the rate (Adam-HD only).
        hypergradient: learn the rate online.
        batch: the mini-batch size.
        seed: seeds the data and the batches.

    Returns:
        A dict with ``losses`` (the full-data loss after every step), ``lrs`` (the rate used at
        each step) and ``hypergradients`` (each step's derivative of the loss w.r.t. the rate).
    """
    x, y = make_data(seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    # Leaves at the first step; afterwards functions of the rate through the last update.
    params = {
        "w": torch.zeros(x.shape[1], requires_grad=True),
        "b": torch.zeros((), requires_grad=True),
    }
    rate = torch.tensor(lr, requires_grad=hypergradient)
    tx = diffopt.inject_hyperparams(diffopt.adam)(lr=rate)
    state = tx.init(params)
    losses, lrs, hypergradients = [], [], []
    for _ in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=g)
        if not hypergradient:  # params are plain tensors: make them leaves of this loss's graph
            params = {k: v.requires_grad_() for k, v in params.items()}
        loss = loss_fn(params, x[idx], y[idx])
        leaves = [params["w"], params["b"]]
        if hypergradient and losses:
            # The loss depends on the rate through the last step: its derivative is the
            # hyper-gradient, and the rate takes one step of plain gradient descent on it.
            *grads, hyper = torch.autograd.grad(loss, [*leaves, rate])
            hypergradients.append(float(hyper))
            rate = (rate - beta * hyper).detach().clamp_min(0.0).requires_grad_()
            state.hyperparams["lr"] = rate
        else:
            grads = list(torch.autograd.grad(loss, leaves, allow_unused=True))
        lrs.append(float(rate.detach()))
        detached = {k: v.detach() for k, v in params.items()}
        updates, state = tx.update(
            {"w": grads[0].detach(), "b": grads[1].detach()}, state, params=detached, inplace=False
        )
        params = diffopt.apply_updates(detached, updates, inplace=False)
        with torch.no_grad():
            losses.append(float(loss_fn(params, x, y)))
    return {"losses": losses, "lrs": lrs, "hypergradients": hypergradients}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--lr", type=float, default=1e-3, help="initial learning rate")
    parser.add_argument("--beta", type=float, default=1e-3, help="hyper-learning rate")
    parser.add_argument("--quick", action="store_true", help="a few steps (for tests)")
    args = parser.parse_args(argv)
    steps = 150 if args.quick else args.steps
    plain = train(steps, args.lr, args.beta, hypergradient=False)
    hd = train(steps, args.lr, args.beta, hypergradient=True)
    print(f"{'step':>6} {'Adam loss':>10} {'Adam-HD loss':>13} {'Adam-HD lr':>11}")
    for t in sorted({0, steps // 4, steps // 2, 3 * steps // 4, steps - 1}):
        print(f"{t:>6} {plain['losses'][t]:>10.4f} {hd['losses'][t]:>13.4f} {hd['lrs'][t]:>11.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
