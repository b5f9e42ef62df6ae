"""iMAML few-shot sinusoid regression with implicit meta-gradients (Rajeswaran et al., 2019).

Each task is a sinusoid ``a sin(x + p)`` seen through 10 support points. The inner problem
adapts a copy ``phi`` of the meta-network ``theta`` to the support set with a proximal term,

    phi*(theta) = argmin_phi  mse_support(phi) + lam/2 ||phi - theta||^2,

solved by L-BFGS (whose line searches could not be unrolled) and never differentiated. The
meta-gradient of the query loss comes from the implicit function theorem,
d phi*/d theta = lam (H + lam I)^-1 with H the support loss's Hessian, computed by a few
conjugate-gradient iterations of Hessian-vector products
(:class:`diffopt.nn.ImplicitMetaGradientModule` with ``linear_solve=solve_cg(maxiter=5)``):
memory does not grow with the number of inner steps. (A ReLU network's Hessian is indefinite in
places, so CG warns once that the operator is not positive definite; five truncated CG steps
still give a useful meta-gradient, as in the paper.)

Run: ``python packages/diffopt/examples/imaml_fewshot.py`` (about a minute on a laptop CPU). A
progress bar (on stderr; ``--no-progress``, ``NO_PROGRESS=1`` or ``TQDM_DISABLE=1`` hides it)
runs over the outer iterations, and a summary table of the losses closes the run.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time

import torch
from torch import nn

import diffopt as torchopt  # a drop-in for TorchOpt's API

SUPPORT, QUERY = 10, 10


def sample_tasks(num_tasks: int, generator: torch.Generator) -> list[tuple[torch.Tensor, ...]]:
    tasks = []
    for _ in range(num_tasks):
        amplitude = 0.1 + 4.9 * torch.rand((), generator=generator)
        phase = math.pi * torch.rand((), generator=generator)
        x = 10 * torch.rand(SUPPORT + QUERY, 1, generator=generator) - 5
        y = amplitude * torch.sin(x + phase)
        tasks.append((x[:SUPPORT], y[:SUPPORT], x[SUPPORT:], y[SUPPORT:]))
    return tasks


class InnerNet(
    torchopt.nn.ImplicitMetaGradientModule,
    linear_solve=torchopt.linear_solve.solve_cg(maxiter=5),
):
    """The task-adapted copy of the meta-network, with the proximal inner objective."""

    def __init__(self, meta_net: nn.Module, lam: float, steps: int):
        super().__init__()
        self.meta_net = meta_net  # a constructor argument: its parameters are meta-parameters
        self.net = copy.deepcopy(meta_net)  # inner parameters, started at theta
        self.lam, self.steps = lam, steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def objective(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fit = nn.functional.mse_loss(self.net(x), y)
        prox = sum(
            (p - q).pow(2).sum() for p, q in zip(self.net.parameters(), self.meta_net.parameters())
        )
        return fit + 0.5 * self.lam * prox

    def solve(self, x: torch.Tensor, y: torch.Tensor) -> InnerNet:
        # Any solver works: it is never differentiated. L-BFGS reaches the accurate inner optimum
        # that the implicit function theorem assumes in a handful of iterations.
        parameters = list(self.net.parameters())
        optimizer = torch.optim.LBFGS(
            parameters, lr=1.0, max_iter=self.steps, history_size=10, line_search_fn="strong_wolfe"
        )

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = self.objective(x, y)
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
        return self


def progress_bar(iterable, no_progress: bool, **kwargs):
    """A tqdm bar on stderr, so stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise ImportError("the progress bar needs tqdm: pip install 'diffopt[examples]'") from error
    if no_progress or os.environ.get("NO_PROGRESS", "") not in ("", "0"):
        kwargs["disable"] = True  # never pass disable=False: it would override TQDM_DISABLE=1
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def adapted_query_loss(meta_net, task, args) -> torch.Tensor:
    x_s, y_s, x_q, y_q = task
    inner = InnerNet(meta_net, args.lam, args.inner_steps)
    inner.solve(x_s, y_s)
    return nn.functional.mse_loss(inner(x_q), y_q)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--meta-batch", type=int, default=5)
    parser.add_argument("--inner-steps", type=int, default=10)
    parser.add_argument("--lam", type=float, default=1.0)
    parser.add_argument("--meta-lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny tensors: threading overhead would dominate
    torch.manual_seed(args.seed)
    train_gen = torch.Generator().manual_seed(args.seed)
    test_tasks = sample_tasks(50, torch.Generator().manual_seed(args.seed + 1))
    meta_net = nn.Sequential(
        nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1)
    )
    meta_optimizer = torch.optim.Adam(meta_net.parameters(), lr=args.meta_lr)

    def evaluate() -> tuple[float, float]:
        with torch.no_grad():  # solve() still runs its inner optimization with grad enabled
            adapted = sum(adapted_query_loss(meta_net, t, args).item() for t in test_tasks)
            unadapted = sum(nn.functional.mse_loss(meta_net(t[2]), t[3]).item() for t in test_tasks)
        return adapted / len(test_tasks), unadapted / len(test_tasks)

    adapted, unadapted = evaluate()
    first_adapted, first_unadapted = adapted, unadapted
    print(
        f"iMAML on sinusoids: {args.meta_batch} tasks/batch, {args.inner_steps} inner L-BFGS "
        f"iterations, lam={args.lam}, 5 CG steps for the implicit meta-gradient"
    )
    print(
        f"before meta-training: meta-test query MSE {adapted:.3f} after adaptation "
        f"({unadapted:.3f} without)"
    )
    start = time.perf_counter()
    running = first_train = None
    bar = progress_bar(range(1, args.iterations + 1), args.no_progress, desc="iMAML", unit="it")
    for iteration in bar:
        meta_optimizer.zero_grad()
        loss = (
            sum(
                adapted_query_loss(meta_net, t, args)
                for t in sample_tasks(args.meta_batch, train_gen)
            )
            / args.meta_batch
        )
        loss.backward()  # implicit meta-gradient into meta_net's parameters
        torch.nn.utils.clip_grad_norm_(meta_net.parameters(), 10.0)
        meta_optimizer.step()
        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        first_train = running if first_train is None else first_train
        if iteration % 25 == 0 or iteration == args.iterations:
            adapted, unadapted = evaluate()
            bar.write(
                f"[{iteration:4d}/{args.iterations}] {time.perf_counter() - start:5.1f}s  "
                f"meta-train query MSE {running:.3f}  meta-test query MSE {adapted:.3f} "
                f"after adaptation ({unadapted:.3f} without)"
            )
        bar.set_postfix(refresh=False, meta_train=f"{running:.3f}", meta_test=f"{adapted:.3f}")
    bar.close()
    elapsed = time.perf_counter() - start
    print("\n| metric | value |\n|---|---|")
    print(f"| meta-train query MSE after adaptation, first batch -> last (running mean) | "
          f"{first_train:.3f} -> {running:.3f} |")
    print(f"| meta-test query MSE after adaptation, 50 held-out tasks | {first_adapted:.3f} "
          f"(before meta-training) -> {adapted:.3f} (after) |")
    print(f"| meta-test query MSE without adaptation | {first_unadapted:.3f} -> {unadapted:.3f} |")
    print(f"| outer iterations, wall time | {args.iterations} in {elapsed:.1f} s |")


if __name__ == "__main__":
    main()
