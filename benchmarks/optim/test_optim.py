"""fused-optim as a pytest-benchmark suite: ``step()`` against torch.optim's foreach, for-loop and
fused paths, and the differentiable Adam update (forward + backward) against op-by-op PyTorch and
TorchOpt; ``--compiled`` adds torch.compile(step). The workloads are bench_optim.py's.

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

STEP_OPTIMIZERS = _suite.pick(list(workloads.OPTIMIZERS), ["Adam", "SGD"])
STEP_SHAPES = _suite.pick(list(workloads.STEP_CASES), ["200 x 1k"])
DIFF_SHAPES = _suite.pick(list(workloads.DIFF_CASES), ["1 x 1e3", "50 x 2e3"])


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
    "test_step_low_precision": _suite.Report(
        title="fused-optim step() in bfloat16 / float16",
        pairs=[_suite.Pair("foreach", "fused_optim", 2.0),
               _suite.Pair("fused=True", "fused_optim", 1.0)],
        note="ratio = torch time / fused_optim time (medians); above 1: fused_optim is faster. "
             "Bandwidth: bytes each step reads and writes per second, as a share of the same "
             "run's Tensor.copy_ moving as many bytes",
        notes=workloads.bandwidth_notes,
        ours=("fused_optim",),
        threads=2),
    "test_differentiable_adam": _suite.Report(
        title="differentiable Adam direction, forward + backward",
        pairs=[_suite.Pair("op-by-op", "fused_optim", 2.0),
               _suite.Pair("torchopt AdamOp", "fused_optim", 1.3),
               _suite.Pair("torchopt scale_by_adam", "fused_optim")],
        note="ratio = peer time / fused_optim time (medians); above 1: fused_optim is faster",
        notes=lambda done: [f"(peer: {done[0].info['peer']})"] if done else [],
        threads=2),
    "test_differentiable_adafactor": _suite.Report(
        title="differentiable Adafactor update, forward + backward",
        pairs=[_suite.Pair("op-by-op", "fused_optim"),
               _suite.Pair("diffopt scale_by_adafactor", "fused_optim")],
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
    make_shapes, rounds = workloads.STEP_CASES[shapes]
    race(lambda: workloads.step_contenders(optimizer, make_shapes()), rounds=rounds, warmup=3,
         **timing())


@pytest.mark.parametrize("contender", ["fused_optim", "foreach", "fused=True", "memory copy"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("optimizer", _suite.pick(workloads.LOW_PRECISION, ["Adam", "SGD"]))
def test_step_low_precision(race, optimizer, dtype, contender):
    make_shapes, rounds = workloads.STEP_CASES[_suite.pick("4 x 4M", "200 x 1k")]
    race(lambda: workloads.low_precision_contenders(optimizer, make_shapes(), getattr(torch, dtype)),
         rounds=rounds, warmup=3, **timing())


@pytest.mark.parametrize("contender", ["fused_optim", "op-by-op", "torchopt AdamOp",
                                       "torchopt scale_by_adam"])
@pytest.mark.parametrize("tensors", DIFF_SHAPES)
def test_differentiable_adam(race, tensors, contender):
    sizes = workloads.DIFF_CASES[tensors]
    race(lambda: workloads.differentiable_contenders(sizes),
         rounds=5 if sum(sizes) >= 5_000_000 else 30, warmup=3, **timing())


@pytest.mark.parametrize("contender", ["fused_optim", "op-by-op", "diffopt scale_by_adafactor"])
@pytest.mark.parametrize("shapes", list(workloads.ADAFACTOR_DIFF_CASES))
def test_differentiable_adafactor(race, shapes, contender):
    race(lambda: workloads.adafactor_differentiable_contenders(workloads.ADAFACTOR_DIFF_CASES[shapes]),
         rounds=30, warmup=3, **timing())


@pytest.mark.parametrize("contender", ["compiled fused_optim", "compiled torch",
                                       "eager fused=True", "eager fused_optim"])
@pytest.mark.parametrize("shapes", _suite.pick(["200 x 1k", "MLP 2.9M"], ["200 x 1k"]))
def test_compiled_step(race, request, shapes, contender):
    if not request.config.getoption("--compiled"):
        pytest.skip("torch.compile contenders run with --compiled (minutes of compiling)")
    make_shapes = workloads.STEP_CASES[shapes][0]
    race(lambda: workloads.compiled_step_contenders(make_shapes()),
         rounds=50 if shapes == "200 x 1k" else 20, warmup=3, **timing())
