#!/usr/bin/env python3
"""torch.func.vmap against a Python loop: an ensemble of small models, and task-batched MAML.

Ensemble: N small MLPs (2-32-2, ReLU, NLL on 100 spiral points), each its own parameters and
Adam state, one training step each:

* ``loop``: N ``nn.Module`` s, each with its own ``diffopt.Adam`` (zero_grad, backward, step);
* ``vmap-step``: one ``vmap`` over the models of grad + ``update(inplace=False)`` +
  ``apply_updates`` (the state, step counts included, batched by a vmapped ``init``);
* ``vmap-grad+fused``: the gradients by ``vmap(grad(loss))``, then ONE update of the stacked
  parameters (``[N, ...]`` leaves) by fused-optim's fused Adam, in place: Adam is elementwise, so
  updating the stack is exactly the N updates;
* ``torchopt vmap-step``: the ``vmap-step`` code with TorchOpt, where installed.

MAML: the sinusoid MLP (1-40-40-1) over 10 tasks and the 4-layer conv net (4 x [3x3 conv,
BatchNorm without running stats, ReLU, 2x2 max-pool], 5-way 5-shot 28x28) over 8 tasks, 3 inner
steps of SGD or Adam, one outer step = every task's inner loop + the meta-backward:

* ``loop``: the functional inner loop (``torch.func.grad``) called task by task;
* ``vmap``: the same function under ``vmap`` over the tasks;
* ``torchopt vmap``: the same with TorchOpt, where it runs under vmap.

test_func.py (the pytest-benchmark suite) times the variants side by side, interleaved:

    python benchmarks/func/bench_func.py [--quick] [pytest options]

is ``pytest benchmarks/func/test_func.py`` (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap

import diffopt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "maml"))
from bench_maml import make_conv, make_mlp  # the same networks as the MAML benchmark


def _peer(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# --- ensemble ----------------------------------------------------------------------------------
def spirals(n: int = 100, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, n)
    r = t.sqrt()
    sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
    theta = r * 2 * math.pi
    points = torch.stack([r * sign * torch.cos(theta), r * sign * torch.sin(theta)], 1)
    return points + 0.05 * torch.randn(n, 2, generator=g), (sign > 0).long()


def make_classifier() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2), nn.LogSoftmax(-1))


def ensemble_variants(n_models: int, lr: float = 0.05) -> dict:
    torch.manual_seed(0)
    models = [make_classifier() for _ in range(n_models)]
    x, y = spirals()
    variants = {}

    loop_models = [make_classifier() for _ in range(n_models)]
    for m, src in zip(loop_models, models):
        m.load_state_dict(src.state_dict())
    loop_opts = [diffopt.Adam(m.parameters(), lr=lr) for m in loop_models]

    def loop():
        for model, opt in zip(loop_models, loop_opts):
            opt.zero_grad()
            F.nll_loss(model(x), y).backward()
            opt.step()

    variants["loop (diffopt.Adam per model)"] = loop

    base = make_classifier().to("meta")

    def loss(params, x, y):
        return F.nll_loss(functional_call(base, params, (x,)), y)

    def vmap_step_for(lib):
        tx = lib.adam(lr)
        params, _ = stack_module_state(models)
        params = {k: v.detach() for k, v in params.items()}
        state = vmap(tx.init)(params)
        holder = [params, state]

        def step(params, state):
            grads = grad(loss)(params, x, y)
            updates, state = tx.update(grads, state, inplace=False)
            return lib.apply_updates(params, updates, inplace=False), state

        batched = vmap(step)

        def run():
            holder[0], holder[1] = batched(holder[0], holder[1])

        return run

    variants["vmap-step (diffopt)"] = vmap_step_for(diffopt)

    tx = diffopt.adam(lr, use_accelerated_op=True)
    params, _ = stack_module_state(models)
    params = {k: v.detach() for k, v in params.items()}
    state = [tx.init(params)]
    batched_grad = vmap(grad(loss), in_dims=(0, None, None))

    def grad_then_fused():
        grads = batched_grad(params, x, y)
        updates, state[0] = tx.update(grads, state[0], inplace=True)
        diffopt.apply_updates(params, updates, inplace=True)

    variants["vmap-grad + one fused update (diffopt)"] = grad_then_fused
    torchopt = _peer("torchopt")
    if torchopt is not None:
        variants["vmap-step (torchopt)"] = vmap_step_for(torchopt)
    return variants


# --- MAML --------------------------------------------------------------------------------------
def make_tasks(problem: str, n_tasks: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if problem == "mlp":
        amplitude = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=g)
        phase = math.pi * torch.rand(n_tasks, 1, 1, generator=g)
        xs = 10 * torch.rand(n_tasks, 10, 1, generator=g) - 5
        xq = 10 * torch.rand(n_tasks, 10, 1, generator=g) - 5
        return xs, amplitude * torch.sin(xs + phase), xq, amplitude * torch.sin(xq + phase)
    xs = torch.randn(n_tasks, 25, 1, 28, 28, generator=g)
    xq = torch.randn(n_tasks, 25, 1, 28, 28, generator=g)
    ys = torch.arange(5).repeat_interleave(5).expand(n_tasks, 25)
    return xs, ys, xq, ys.clone()


def maml_variants(problem: str, inner: str, steps: int = 3) -> dict:
    torch.manual_seed(0)
    net = make_mlp() if problem == "mlp" else make_conv()
    tasks = make_tasks(problem, 10 if problem == "mlp" else 8)
    criterion = F.mse_loss if problem == "mlp" else F.cross_entropy
    params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}

    def loss(params, x, y):
        return criterion(functional_call(net, params, (x,)), y)

    def task_loss_for(lib):
        tx = lib.sgd(0.1) if inner == "sgd" else lib.adam(0.01)

        def task_loss(params, xs, ys, xq, yq):
            state = tx.init(params)
            for _ in range(steps):
                updates, state = tx.update(grad(loss)(params, xs, ys), state, params=params,
                                           inplace=False)
                params = lib.apply_updates(params, updates, inplace=False)
            return loss(params, xq, yq)

        return task_loss

    def looped():
        task_loss = task_loss_for(diffopt)
        sum(task_loss(params, *task) for task in zip(*tasks)).backward()

    def vmapped_for(lib):
        task_loss = vmap(task_loss_for(lib), in_dims=(None, 0, 0, 0, 0))

        def run():
            task_loss(params, *tasks).sum().backward()

        return run

    variants = {"loop (diffopt)": looped, "vmap (diffopt)": vmapped_for(diffopt)}
    torchopt = _peer("torchopt")
    if torchopt is not None:
        try:
            vmapped_for(torchopt)()
            variants["vmap (torchopt)"] = vmapped_for(torchopt)
        except RuntimeError as error:  # the reason, where a callable would be: a skip
            variants["vmap (torchopt)"] = ("TorchOpt does not run under vmap: "
                                           f"{str(error).splitlines()[0][:80]}")
    return variants


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _suite

    sys.exit(_suite.run_suite(Path(__file__).with_name("test_func.py"), sys.argv[1:]))
