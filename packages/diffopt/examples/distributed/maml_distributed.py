#!/usr/bin/env python3
"""Distributed MAML on sinusoid regression: one task's inner loop per RPC call, over all workers.

Launch with torchrun (every process runs this file; rank 0 trains, the others serve RPCs):

    torchrun --standalone --nproc_per_node=2 \\
        packages/diffopt/examples/distributed/maml_distributed.py [--iterations 300]

Plain ``python maml_distributed.py`` runs the same code as a world of one worker.

Each outer step samples a batch of sinusoid tasks of shape ``(tasks, points, 1)``.
``inner_loop`` is decorated with ``diffopt.distributed.parallelize``: the partitioner
``dim_partitioner(0, exclusive=True, keepdim=False)`` makes one call per task, dealt to the workers
in turn; on its worker each call adapts a copy of the network with a few differentiable
``diffopt.MetaSGD`` steps and returns the query loss; ``mean_reducer`` averages the losses on rank
0. Inside ``diffopt.distributed.autograd.context()``, ``backward`` sends the meta-gradient back
through every worker's inner loop to the meta-parameters on rank 0, which a plain
``torch.optim.Adam`` then updates. The network is sent as ``module_clone(net, by='clone')``: RPC
would detach ``nn.Parameter`` leaves sent as they are.

Rank 0 shows a progress bar on stderr (``--no-progress``, ``NO_PROGRESS=1`` or ``TQDM_DISABLE=1``
hides it), logs every ``--log-every`` steps and ends with a summary table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import diffopt
import diffopt.distributed as todist


def sample_tasks(n_tasks: int, k: int, generator: torch.Generator):
    """Support and query sets of ``n_tasks`` sinusoids ``A sin(x + phase)``, ``k`` points each."""
    amplitude = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=generator)
    phase = math.pi * torch.rand(n_tasks, 1, 1, generator=generator)
    x = 10.0 * torch.rand(n_tasks, 2 * k, 1, generator=generator) - 5.0
    y = amplitude * torch.sin(x + phase)
    return x[:, :k], y[:, :k], x[:, k:], y[:, k:]


def make_model() -> nn.Module:
    """The 1-40-40-1 ReLU network of the MAML paper."""
    return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(),
                         nn.Linear(40, 1))


@todist.parallelize(partitioner=todist.dim_partitioner(0, exclusive=True, keepdim=False),
                    reducer=todist.mean_reducer)
def inner_loop(net: nn.Module, x_support, y_support, x_query, y_query, steps: int, lr: float):
    """Runs on a worker, once per task: adapt ``net`` on the support set, return the query loss."""
    for p in net.parameters():
        if not p.requires_grad:  # sent outside an autograd context (evaluation)
            p.requires_grad_()
    inner = diffopt.MetaSGD(net, lr=lr)
    for _ in range(steps):
        inner.step(F.mse_loss(net(x_support), y_support))
    return F.mse_loss(net(x_query), y_query)


def progress_bar(iterable, no_progress: bool, **kwargs):
    """A tqdm bar on stderr, so stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise ImportError("the progress bar needs tqdm: pip install 'diffopt[examples]'") from error
    if no_progress or os.environ.get("NO_PROGRESS", "") not in ("", "0"):
        kwargs["disable"] = True  # never pass disable=False: it would override TQDM_DISABLE=1
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def worker_init() -> None:
    torch.set_num_threads(1)  # one process per core: no intra-op threads fighting over cores


@todist.rank_zero_only
def train(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    net = make_model()
    meta_opt = torch.optim.Adam(net.parameters(), lr=args.meta_lr)
    test_tasks = sample_tasks(args.tasks, args.k, torch.Generator().manual_seed(args.seed + 1))
    world = todist.get_world_info()
    print(f"distributed MAML: {world.world_size} worker(s), {args.tasks} tasks per outer step, "
          f"{args.inner_steps} inner SGD steps", flush=True)

    def meta_test() -> float:
        clone = diffopt.module_clone(net, by="deepcopy")
        return inner_loop(clone, *test_tasks, args.inner_steps, args.inner_lr).item()

    first_test = meta_test()
    train_losses = []
    start = time.perf_counter()
    bar = progress_bar(range(1, args.iterations + 1), args.no_progress, desc="distributed MAML",
                       unit="step")
    for iteration in bar:
        tasks = sample_tasks(args.tasks, args.k, generator)
        with todist.autograd.context() as context_id:
            loss = inner_loop(diffopt.module_clone(net, by="clone"), *tasks, args.inner_steps,
                              args.inner_lr)
            meta_opt.zero_grad()
            todist.autograd.backward(context_id, loss)
        meta_opt.step()
        train_losses.append(loss.item())
        bar.set_postfix(meta_train=f"{train_losses[-1]:.4f}")
        if iteration % args.log_every == 0 or iteration == args.iterations:
            elapsed = time.perf_counter() - start
            bar.write(f"iteration {iteration:5d}  meta-train loss {loss.item():8.4f}  "
                      f"{elapsed / iteration * 1e3:7.1f} ms/step")
    bar.close()
    elapsed = time.perf_counter() - start
    last_test = meta_test()
    print(f"meta-test loss after adaptation: {first_test:.4f} -> {last_test:.4f}", flush=True)
    print("\n| metric | value |\n|---|---|")
    print(f"| meta-train query MSE (mean over {args.tasks} tasks), first -> last step | "
          f"{train_losses[0]:.4f} -> {train_losses[-1]:.4f} |")
    print(f"| meta-test query MSE after {args.inner_steps} inner step(s), {args.tasks} held-out "
          f"tasks | {first_test:.4f} -> {last_test:.4f} |")
    print(f"| outer steps on {world.world_size} worker(s), wall time | {args.iterations} in "
          f"{elapsed:.1f} s ({elapsed / args.iterations * 1e3:.1f} ms/step) |", flush=True)


@todist.auto_init_rpc(worker_init)
def main() -> None:
    parser = argparse.ArgumentParser(description="distributed MAML on sinusoids (torchrun)")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--tasks", type=int, default=16, help="tasks per outer step")
    parser.add_argument("--k", type=int, default=10, help="support (and query) points per task")
    parser.add_argument("--inner-steps", type=int, default=1)
    parser.add_argument("--inner-lr", type=float, default=0.01)
    parser.add_argument("--meta-lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    train(parser.parse_args())


if __name__ == "__main__":
    main()
