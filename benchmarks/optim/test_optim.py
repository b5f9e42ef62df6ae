"""fused-optim as a pytest-benchmark suite: ``step()`` against torch.optim's foreach, for-loop and
fused paths, and the differentiable Adam update (forward + backward) against op-by-op PyTorch and
TorchOpt; ``--compiled`` adds torch.compile(step). Workloads come from bench_optim.py.

Each sample is one call; a workload's contenders run interleaved (benchmarks/_suite.py), with
``torch.cuda.synchronize`` around each call under ``--device cuda``. 2 threads unless
``--threads``.

    pytest benchmarks/optim [--device cuda] [--compiled] [-k "Adam and 200"]
"""

from __future__ import annotations

import _suite
import bench_optim as workloads  # this folder is on sys.path (pytest's prepend import mode)
import pytest
import torch

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F

STEP_CASES = {"200 x 1k": (workloads.shapes_many_small, 200),
              "4 x 4M": (workloads.shapes_few_large, 10),
              "MLP 2.9M": (workloads.shapes_mlp, 30)}
STEP_OPTIMIZERS = _suite.pick(list(workloads.OPTIMIZERS), ["Adam", "SGD"])
STEP_SHAPES = _suite.pick(list(STEP_CASES), ["200 x 1k"])
DIFF_CASES = {"1 x 1e3": [1000], "1 x 1e5": [100_000], "1 x 1e7": [10_000_000],
              "50 x 2e3": [2000] * 50, "50 x 2e5": [200_000] * 50}
DIFF_SHAPES = _suite.pick(list(DIFF_CASES), ["1 x 1e3", "50 x 2e3"])
B1, B2, EPS = 0.9, 0.999, 1e-8


def _many_small(params) -> bool:
    return params["shapes"] == "200 x 1k"


REPORT = {
    "test_step": _suite.Report(
        title="fused-optim step()",
        pairs=[_suite.Pair("foreach", "fused_optim", 2.0, _many_small, "200 x 1k"),
               _suite.Pair("foreach=False", "fused_optim"),
               _suite.Pair("fused=True", "fused_optim", 1.0)],
        note="ratio = torch time / fused_optim time (medians); above 1: fused_optim is faster",
        threads=2),
    "test_differentiable_adam": _suite.Report(
        title="differentiable Adam direction, forward + backward",
        pairs=[_suite.Pair("op-by-op", "fused_optim", 2.0),
               _suite.Pair("torchopt AdamOp", "fused_optim", 1.3),
               _suite.Pair("torchopt scale_by_adam", "fused_optim")],
        note="ratio = peer time / fused_optim time (medians); above 1: fused_optim is faster",
        threads=2),
    "test_compiled_step": _suite.Report(
        title="torch.compile(step)",
        pairs=[_suite.Pair("compiled torch", "compiled fused_optim"),
               _suite.Pair("eager fused=True", "compiled fused_optim")],
        threads=2),
}


@pytest.fixture(scope="module", autouse=True)
def device(request):
    workloads.DEVICE = torch.device(request.config.getoption("--device"))
    yield workloads.DEVICE
    workloads.DEVICE = torch.device("cpu")


def timing():
    return {"sync": workloads.sync if workloads.DEVICE.type == "cuda" else None}


@pytest.mark.parametrize("contender", ["fused_optim", "foreach", "foreach=False", "fused=True"])
@pytest.mark.parametrize("shapes", STEP_SHAPES)
@pytest.mark.parametrize("optimizer", STEP_OPTIMIZERS)
def test_step(race, optimizer, shapes, contender):
    make_shapes, rounds = STEP_CASES[shapes]
    kw = workloads.OPTIMIZERS[optimizer]
    torch_cls, ours_cls = getattr(torch.optim, optimizer), getattr(fused_optim, optimizer)

    def build():
        fns = {"fused_optim": lambda p: ours_cls(p, **kw),
               "foreach": lambda p: torch_cls(p, foreach=True, **kw),
               "foreach=False": lambda p: torch_cls(p, foreach=False, **kw)}
        if workloads.torch_has_fused(torch_cls):
            fns["fused=True"] = lambda p: torch_cls(p, fused=True, **kw)
        steps = {name: workloads.make_step(make, make_shapes()) for name, make in fns.items()}
        return {"fused=True": f"torch has no fused {optimizer} on {workloads.DEVICE}", **steps}

    race(build, rounds=rounds, warmup=3, **timing())


def differentiable_contenders(sizes: list[int]) -> dict:
    """Forward + backward of the Adam direction on the same tensors, by each implementation."""
    gen = torch.Generator().manual_seed(0)
    device = workloads.DEVICE
    grads = [torch.randn(n, generator=gen).to(device).requires_grad_() for n in sizes]
    mus = [torch.randn(n, generator=gen).mul_(0.01).to(device).requires_grad_() for n in sizes]
    nus = [torch.rand(n, generator=gen).mul_(1e-4).to(device).requires_grad_() for n in sizes]
    weights = [torch.randn(n, generator=gen).to(device) for n in sizes]
    leaves = grads + mus + nus

    def loss_of(directions):
        return sum((d * w).sum() for d, w in zip(directions, weights))

    def ours():
        d, _, _ = F.adam_direction(grads, mus, nus, 3, beta1=B1, beta2=B2, eps=EPS)
        torch.autograd.grad(loss_of(d), leaves)

    def op_by_op():
        d, _, _ = _reference.adam_direction(grads, mus, nus, step=3, beta1=B1, beta2=B2, eps=EPS,
                                            eps_root=0.0)
        torch.autograd.grad(loss_of(d), leaves)

    fns = {"fused_optim": ours, "op-by-op": op_by_op}
    adam_op_cls, note = workloads.torchopt_adam_op()
    if adam_op_cls is None:
        fns["torchopt AdamOp"] = note
    else:
        op, count = adam_op_cls(b1=B1, b2=B2, eps=EPS, eps_root=0.0, inplace=False), torch.tensor(3)

        def adam_op():
            outs = [op(m, v, g, count) for g, m, v in zip(grads, mus, nus)]
            torch.autograd.grad(loss_of([o[2] for o in outs]), leaves)

        fns["torchopt AdamOp"] = adam_op
    scale_by_adam = workloads.torchopt_scale_by_adam()
    if scale_by_adam is None:
        fns["torchopt scale_by_adam"] = "torchopt is not installed"
    else:
        tx = scale_by_adam(b1=B1, b2=B2, eps=EPS, eps_root=0.0, moment_requires_grad=True)
        state = tx.init(grads)
        state = state._replace(mu=type(state.mu)(mus), nu=type(state.nu)(nus))

        def plain():
            updates, _ = tx.update(grads, state, inplace=False)
            torch.autograd.grad(loss_of(updates), leaves)

        fns["torchopt scale_by_adam"] = plain
    return fns, {"peer": note}


@pytest.mark.parametrize("contender", ["fused_optim", "op-by-op", "torchopt AdamOp",
                                       "torchopt scale_by_adam"])
@pytest.mark.parametrize("tensors", DIFF_SHAPES)
def test_differentiable_adam(race, tensors, contender):
    sizes = DIFF_CASES[tensors]
    race(lambda: differentiable_contenders(sizes), rounds=5 if sum(sizes) >= 5_000_000 else 30,
         warmup=3, **timing())


@pytest.mark.parametrize("contender", ["compiled fused_optim", "compiled torch",
                                       "eager fused=True", "eager fused_optim"])
@pytest.mark.parametrize("shapes", _suite.pick(["200 x 1k", "MLP 2.9M"], ["200 x 1k"]))
def test_compiled_step(race, request, shapes, contender):
    if not request.config.getoption("--compiled"):
        pytest.skip("torch.compile contenders run with --compiled (minutes of compiling)")
    make_shapes = STEP_CASES[shapes][0]

    def build():
        step = workloads.make_step
        return {
            "compiled fused_optim": torch.compile(step(lambda p: fused_optim.Adam(p, lr=1e-3),
                                                       make_shapes())),
            "compiled torch": torch.compile(step(lambda p: torch.optim.Adam(p, lr=1e-3),
                                                 make_shapes())),
            "eager fused=True": step(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True),
                                     make_shapes()),
            "eager fused_optim": step(lambda p: fused_optim.Adam(p, lr=1e-3), make_shapes()),
        }

    race(build, rounds=50 if shapes == "200 x 1k" else 20, warmup=3, **timing())
