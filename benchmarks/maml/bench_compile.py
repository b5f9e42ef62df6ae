#!/usr/bin/env python3
"""torch.compile against eager on the MAML sinusoid MLP, and what still keeps diffopt out of a graph.

The problem is bench_maml.py's ``mlp``: the 1-40-40-1 ReLU MLP, 10 tasks of K=10 support and 10
query points per outer step, 3 differentiable inner Adam steps (lr 0.01), float32, 1 thread. One
outer step computes every task's inner loop and the mean meta-gradient, then takes an outer Adam
step (``fused_optim.Adam``, eager in every variant). Variants, timed interleaved in one process:

- ``func eager``: the step written with ``torch.func`` (inner gradients by ``torch.func.grad``,
  updates by ``fused_optim.functional.adam_update``, the meta-gradient by an outer
  ``torch.func.grad_and_value`` per task);
- ``func compiled``: the same function under ``torch.compile`` (inductor, ``fullgraph=True``:
  one graph, no break);
- ``diffopt func eager`` / ``diffopt func compiled``: the same step with diffopt's functional
  optimizer, ``diffopt.adam(lr, use_accelerated_op=True)``'s ``init``/``update`` and
  ``diffopt.apply_updates`` on the parameter dict, eager and compiled (one graph: diffopt's
  pytree calls trace through its Dynamo twins of optree-core's functions, and under compile the
  accelerated Adam runs its unfused math, which inductor fuses);
- ``MetaAdam eager``: what diffopt users run today, ``diffopt.MetaAdam(use_accelerated_op=True)``
  on the ``nn.Module`` with ``loss.backward()`` (autograd, ``create_graph`` inner gradients).

test_compile.py (the pytest-benchmark suite) times the variants side by side and compares the
compiled and eager meta-gradients. Then each blocker met on the way to compiling diffopt's own
code runs as a minimal reproduction and prints what torch says now (the pytree ones compile
since diffopt registers its Dynamo twins of optree-core's functions).

    python benchmarks/maml/bench_compile.py [--skip-blockers | --blockers-only] [pytest options]

runs ``pytest benchmarks/maml/test_compile.py --compiled`` (see benchmarks/RESULTS.md), then the
blockers.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import diffopt
import fused_optim
from fused_optim import functional as FF

NAMES = ("0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias")
K, INNER_STEPS, INNER_LR = 10, 3, 0.01


def make_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))


def sample_tasks(n_tasks: int, generator: torch.Generator):
    amplitude = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=generator)
    phase = torch.pi * torch.rand(n_tasks, 1, 1, generator=generator)
    x = 10 * torch.rand(n_tasks, 2 * K, 1, generator=generator) - 5
    return x, amplitude * torch.sin(x + phase)


def mean_meta_gradient(task_loss, n_tasks: int):
    """The outer step: every task's meta-gradient and query loss by ``grad_and_value``, averaged."""

    def step(params, x, y):
        results = [torch.func.grad_and_value(task_loss)(params, x[t], y[t]) for t in range(n_tasks)]
        grads = {n: sum(g[n] for g, _ in results) / n_tasks for n in NAMES}
        return grads, sum(loss for _, loss in results) / n_tasks

    return step


def func_step_fn(net: nn.Module, n_tasks: int):
    """The meta-gradient (mean over tasks) and query loss of one outer step, in torch.func."""

    def task_loss(params, x, y):
        m = [torch.zeros_like(params[n]) for n in NAMES]
        v = [torch.zeros_like(params[n]) for n in NAMES]
        for step in range(1, INNER_STEPS + 1):
            g = torch.func.grad(lambda q: F.mse_loss(torch.func.functional_call(net, q, (x[:K],)), y[:K]))(params)
            new = FF.adam_update([params[n] for n in NAMES], [g[n] for n in NAMES], m, v, step, lr=INNER_LR)
            params, m, v = dict(zip(NAMES, new.params)), new.exp_avgs, new.exp_avg_sqs
        return F.mse_loss(torch.func.functional_call(net, params, (x[K:],)), y[K:])

    return mean_meta_gradient(task_loss, n_tasks)


def diffopt_step_fn(net: nn.Module, n_tasks: int):
    """:func:`func_step_fn`'s step with diffopt's functional Adam instead of fused-optim's op."""
    tx = diffopt.adam(INNER_LR, use_accelerated_op=True)

    def task_loss(params, x, y):
        state = tx.init(params)
        for _ in range(INNER_STEPS):
            g = torch.func.grad(lambda q: F.mse_loss(torch.func.functional_call(net, q, (x[:K],)), y[:K]))(params)
            updates, state = tx.update(g, state, params=params, inplace=False)
            params = diffopt.apply_updates(params, updates, inplace=False)
        return F.mse_loss(torch.func.functional_call(net, params, (x[K:],)), y[K:])

    return mean_meta_gradient(task_loss, n_tasks)


def make_func_runner(step_fn, net: nn.Module):
    outer = fused_optim.Adam(net.parameters(), lr=1e-3)
    params = dict(net.named_parameters())

    def run(x, y):
        grads, loss = step_fn({n: p.detach() for n, p in params.items()}, x, y)
        for n, p in params.items():
            p.grad = grads[n]
        outer.step()
        return loss

    return run


def make_meta_adam_runner(net: nn.Module, n_tasks: int):
    outer = fused_optim.Adam(net.parameters(), lr=1e-3)
    start = diffopt.extract_state_dict(net)

    def run(x, y):
        outer.zero_grad()
        total = 0.0
        for t in range(n_tasks):
            inner = diffopt.MetaAdam(net, lr=INNER_LR, use_accelerated_op=True)
            for _ in range(INNER_STEPS):
                inner.step(F.mse_loss(net(x[t, :K]), y[t, :K]))
            loss = F.mse_loss(net(x[t, K:]), y[t, K:]) / n_tasks
            loss.backward()
            total += loss.detach()
            diffopt.recover_state_dict(net, start)
        outer.step()
        return total

    return run


# --- the blockers, each as small as it gets ------------------------------------------------------

def blocker_optree_core():
    import optree_core

    def f(tree):
        leaves, _ = optree_core.tree_flatten({"b": tree["a"] + 1})
        return [leaf * 2 for leaf in leaves]

    return torch._dynamo.explain(f)({"a": torch.ones(2)})


def blocker_nanobind_method():
    import optree_core

    def f(tree):
        leaves, spec = optree_core.tree_flatten(tree)
        return spec.unflatten([leaf * 2 for leaf in leaves])

    return torch.compile(f, backend="eager")({"a": torch.ones(2)})


def blocker_outside_treespec():
    import optree_core

    spec = optree_core.tree_structure({"a": 0, "b": 0})  # built in eager code: a nanobind object

    def f(x):
        return optree_core.tree_unflatten(spec, [x, x + 1])

    return torch.compile(f, backend="eager")(torch.ones(2))


def blocker_diffopt_update():
    opt = diffopt.adam(lr=0.01, use_accelerated_op=True)
    params = {"w": torch.ones(3)}
    state = opt.init(params)

    def f(grads, state):
        updates, state = opt.update(grads, state, inplace=False)
        return diffopt.apply_updates(params, updates, inplace=False)

    return torch._dynamo.explain(f)({"w": torch.ones(3)}, state)


class _Double(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2


def blocker_vmap_grad_function():
    def f(w, x):
        return torch.vmap(torch.func.grad(lambda w, x: _Double.apply(w * x).sum()), in_dims=(None, 0))(w, x)

    return torch.compile(f, backend="eager", fullgraph=True)(torch.randn(4), torch.randn(3, 4))


def blocker_autograd_double_backward():
    w = torch.randn(3, requires_grad=True)

    def maml(x):
        (g,) = torch.autograd.grad((w * x).pow(2).sum(), w, create_graph=True)
        loss = ((w - 0.1 * g) * x).sum()
        loss.backward()
        return loss

    return torch._dynamo.explain(maml)(torch.randn(3))


def blocker_int_step_recompiles():
    from torch._dynamo.testing import CompileCounter

    def f(p, g, m, v, step):  # the schemas took `int step` (a recompile per step); now `SymInt step`
        out = FF.adam_update(p, g, m, v, step, lr=0.1)
        return out.params, out.exp_avgs, out.exp_avg_sqs

    counter = CompileCounter()
    compiled = torch.compile(f, backend=counter, dynamic=True)
    p, g, m, v = [torch.ones(4)], [torch.ones(4)], [torch.zeros(4)], [torch.zeros(4)]
    for step in range(1, 13):
        p, m, v = compiled(p, g, m, v, step)
    return (f"{counter.frame_count} compilations for 12 calls with steps 1..12 (dynamic=True; past "
            f"torch._dynamo.config.recompile_limit={torch._dynamo.config.recompile_limit} it runs eager)")


BLOCKERS = [
    ("optree_core.tree_flatten (a nanobind function) inside torch.compile", blocker_optree_core),
    ("PyTreeSpec.unflatten (a nanobind method) called at a graph break, torch.compile(backend='eager')",
     blocker_nanobind_method),
    ("diffopt.adam(use_accelerated_op=True).update + apply_updates inside torch.compile", blocker_diffopt_update),
    ("optree_core.tree_unflatten with a treespec built outside the compiled function",
     blocker_outside_treespec),
    ("torch.vmap(torch.func.grad(f)) where f applies an autograd.Function, inside torch.compile",
     blocker_vmap_grad_function),
    ("autograd MAML (torch.autograd.grad(create_graph=True) + backward) inside torch.compile",
     blocker_autograd_double_backward),
    ("fused_optim.functional.adam_update with a Python-int step that changes between calls",
     blocker_int_step_recompiles),
]


def report_blockers() -> None:
    print("\n### What blocked (or blocks) compiling diffopt's own MAML step\n")
    for title, fn in BLOCKERS:
        torch._dynamo.reset()
        try:
            result = fn()
        except Exception as error:  # the point is to print what torch says
            last = traceback.format_exception_only(type(error), error)[-1].strip().splitlines()[0]
            print(f"- {title}: raises `{last[:300]}`")
            continue
        if isinstance(result, str):
            print(f"- {title}: {result}")
        elif hasattr(result, "graph_break_count"):
            reasons = sorted({r.reason.splitlines()[0][:200] for r in result.break_reasons})
            print(f"- {title}: {result.graph_break_count} graph break(s), {result.graph_count} graph(s)"
                  + (f"; first reason: `{reasons[0]}`" if reasons else ""))
        else:
            print(f"- {title}: compiles")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-blockers", action="store_true")
    parser.add_argument("--blockers-only", action="store_true")
    args, rest = parser.parse_known_args(argv)
    torch.set_num_threads(args.threads or 1)
    status = 0
    if not args.blockers_only:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        import _suite

        threads = ["--threads", str(args.threads)] if args.threads else []
        status = _suite.run_suite(Path(__file__).with_name("test_compile.py"),
                                  ["--compiled", *threads, *rest])
    if not args.skip_blockers:
        report_blockers()
    return status


if __name__ == "__main__":
    sys.exit(main())
