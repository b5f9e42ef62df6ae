"""The fused-optim workloads: fused_optim against torch.optim and TorchOpt (test_optim.py, the
pytest-benchmark suite, times them side by side).

Part 1: one ``optimizer.step()`` on (a) 200 tensors of 1k elements, (b) 4 tensors of 4M elements
and (c) a medium MLP, for torch.optim's default (foreach), ``foreach=False``, ``fused=True``
(where torch has it) and ``fused_optim``; part 1b: ``torch.compile(step)`` of both. Part 2: the
differentiable Adam update, forward + backward, against op-by-op PyTorch and TorchOpt's
accelerated Adam op and plain ``scale_by_adam`` (when ``torchopt`` is importable); part 3: the
differentiable Adafactor update against op-by-op PyTorch and diffopt's plain ``scale_by_adafactor``.

    python benchmarks/optim/bench_optim.py [--quick] [--device cuda] [--compiled] [pytest options]

is ``pytest benchmarks/optim/test_optim.py`` (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F

# Where the tensors live (--device); CUDA timings wait for the GPU before reading the clock.
DEVICE = torch.device("cpu")
B1, B2, EPS = 0.9, 0.999, 1e-8


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


# --- part 1: step() ---------------------------------------------------------------------------

def shapes_many_small() -> list[tuple[int, ...]]:
    return [(1000,)] * 200


def shapes_few_large() -> list[tuple[int, ...]]:
    return [(4_000_000,)] * 4


def shapes_mlp() -> list[tuple[int, ...]]:
    # 784-1024-1024-1024-10 MLP: ~2.9M parameters in 8 tensors.
    dims = [784, 1024, 1024, 1024, 10]
    out: list[tuple[int, ...]] = []
    for a, b in itertools.pairwise(dims):
        out += [(b, a), (b,)]
    return out


OPTIMIZERS = {
    "Adam": dict(lr=1e-3),
    "AdamW": dict(lr=1e-3, weight_decay=1e-2),
    "SGD": dict(lr=1e-2, momentum=0.9),
    "Adagrad": dict(lr=1e-2),
    "RMSprop": dict(lr=1e-2),  # torch has no fused RMSprop, NAdam, Rprop, ASGD or Adafactor
    "NAdam": dict(lr=1e-3, weight_decay=1e-2, decoupled_weight_decay=True),
    "Rprop": dict(lr=1e-3),
    "ASGD": dict(lr=1e-2, weight_decay=1e-4),
    "Adafactor": dict(lr=1e-2),
}


def make_step(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
              shapes: list[tuple[int, ...]], dtype: torch.dtype = torch.float32) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).to(DEVICE, dtype).requires_grad_() for s in shapes]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(DEVICE, dtype)
    return make(params).step


def torch_has_fused(torch_cls: type[torch.optim.Optimizer], device: torch.device | str | None = None) -> bool:
    """Whether torch has a fused=True path for this optimizer on ``device`` (DEVICE by default; none
    for RMSprop; some are CPU-only, as Adagrad's is under torch 2.11), found by one step on a probe
    tensor."""
    probe = torch.zeros(2, device=DEVICE if device is None else device, requires_grad=True)
    probe.grad = torch.ones_like(probe)
    try:
        torch_cls([probe], fused=True).step()
    except (TypeError, RuntimeError, ValueError):
        return False
    return True


# Each case: its shapes and the rounds that time it.
STEP_CASES = {"200 x 1k": (shapes_many_small, 200), "4 x 4M": (shapes_few_large, 10),
              "MLP 2.9M": (shapes_mlp, 30)}


def step_contenders(optimizer: str, shapes: list[tuple[int, ...]]) -> dict[str, object]:
    """One ``step()`` on the same tensors by fused_optim and each torch.optim path."""
    kw = OPTIMIZERS[optimizer]
    torch_cls, ours_cls = getattr(torch.optim, optimizer), getattr(fused_optim, optimizer)
    makers = {"fused_optim": lambda p: ours_cls(p, **kw),
              "foreach": lambda p: torch_cls(p, foreach=True, **kw),
              "foreach=False": lambda p: torch_cls(p, foreach=False, **kw)}
    if torch_has_fused(torch_cls):
        makers["fused=True"] = lambda p: torch_cls(p, fused=True, **kw)
    steps = {name: make_step(make, shapes) for name, make in makers.items()}
    return {"fused=True": f"torch has no fused {optimizer} on {DEVICE}", **steps}


# --- part 1a: bfloat16/float16 steps and the memory bandwidth they reach -------------------------

LOW_PRECISION = ["Adam", "AdamW", "SGD", "Adagrad", "RMSprop"]
# Tensor-sized passes over memory in one steady-state step with OPTIMIZERS' options: every list
# read (params, grads, states) plus every list written (params, states). The step counts are
# tensors too but a few bytes each.
PASSES = {"Adam": 4 + 3, "AdamW": 4 + 3, "SGD": 3 + 2, "Adagrad": 3 + 2, "RMSprop": 3 + 2}


def low_precision_contenders(optimizer: str, shapes: list[tuple[int, ...]],
                             dtype: torch.dtype) -> tuple[dict[str, object], dict[str, object]]:
    """One ``step()`` in ``dtype`` by fused_optim and torch.optim's foreach and fused paths, and
    ``Tensor.copy_`` of a buffer that moves as many bytes (read + write) as the step: the
    machine's attainable bandwidth in the same run. ``info["bytes"]``: the bytes a step moves."""
    kw = OPTIMIZERS[optimizer]
    torch_cls, ours_cls = getattr(torch.optim, optimizer), getattr(fused_optim, optimizer)
    step_bytes = PASSES[optimizer] * sum(math.prod(s) for s in shapes) * dtype.itemsize
    src = torch.ones(step_bytes // 2 // 4, device=DEVICE)  # float32; half read, half written
    dst = torch.empty_like(src)
    fns: dict[str, object] = {
        "fused_optim": make_step(lambda p: ours_cls(p, **kw), shapes, dtype),
        "foreach": make_step(lambda p: torch_cls(p, foreach=True, **kw), shapes, dtype),
        "fused=True": f"torch has no fused {optimizer} on {DEVICE}",
        "memory copy": lambda: dst.copy_(src),
    }
    if torch_has_fused(torch_cls):
        fns["fused=True"] = make_step(lambda p: torch_cls(p, fused=True, **kw), shapes, dtype)
    return fns, {"bytes": step_bytes}


def bandwidth_notes(done: list) -> list[str]:
    """Per workload: each step's bytes per second as a fraction of the same run's memory copy."""
    lines = []
    for w in done:
        medians = w.medians()
        copy = medians.get("memory copy")
        if not copy:
            continue
        row = " ".join(str(v) for v in w.params.values())
        parts = [f"{name} {w.info['bytes'] / t / 1e9:.1f} GB/s = {copy / t:.0%}"
                 for name, t in medians.items() if name != "memory copy"]
        lines.append(f"{row}: copy {w.info['bytes'] / copy / 1e9:.1f} GB/s; " + ", ".join(parts))
    return lines


# --- part 1b (opt-in, --compiled): torch.compile of step() ------------------------------------

def compiled_step_contenders(shapes: list[tuple[int, ...]]) -> dict[str, object]:
    """torch.compile(opt.step) (inductor) of fused_optim.Adam and of torch.optim.Adam (foreach),
    with the eager steps of both fused implementations beside them."""
    return {
        "compiled fused_optim": torch.compile(make_step(lambda p: fused_optim.Adam(p, lr=1e-3),
                                                        shapes)),
        "compiled torch": torch.compile(make_step(lambda p: torch.optim.Adam(p, lr=1e-3), shapes)),
        "eager fused=True": make_step(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True), shapes),
        "eager fused_optim": make_step(lambda p: fused_optim.Adam(p, lr=1e-3), shapes),
    }


# --- part 2: differentiable forward + backward -------------------------------------------------

def torchopt_adam_op():
    try:
        import torchopt
        from torchopt.accelerated_op import adam_op
    except Exception as exc:
        return None, f"torchopt not importable ({type(exc).__name__}: {exc})"
    available = getattr(torchopt, "accelerated_op_available", lambda *a, **k: True)
    try:
        ok = available(torch.device("cpu"))
    except TypeError:
        ok = available()
    if not ok:
        return None, f"torchopt {torchopt.__version__}: accelerated op unavailable for this torch"
    try:
        from torchopt._C import adam_op as compiled  # noqa: F401
        kind = "compiled _C kernels"
    except ImportError as exc:
        kind = f"pure-PyTorch fallback, its compiled _C does not load with torch {torch.__version__}: {exc}"[:200]
    return adam_op.AdamOp, f"torchopt {torchopt.__version__} AdamOp ({kind})"


def torchopt_scale_by_adam():
    """TorchOpt's differentiable Adam transform without the accelerated op (plain torch ops)."""
    try:
        import torchopt
    except Exception:
        return None
    return torchopt.transform.scale_by_adam


# The differentiable update's cases: the sizes of the tensors updated together.
DIFF_CASES = {"1 x 1e3": [1000], "1 x 1e5": [100_000], "1 x 1e7": [10_000_000],
              "50 x 2e3": [2000] * 50, "50 x 2e5": [200_000] * 50}


def differentiable_contenders(sizes: list[int]) -> tuple[dict[str, object], dict[str, str]]:
    """Forward + backward of the Adam direction (w.r.t. grads, exp_avgs and exp_avg_sqs) on the
    same tensors by each implementation; and which TorchOpt op was measured."""
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(n, generator=gen).to(DEVICE).requires_grad_() for n in sizes]
    mus = [torch.randn(n, generator=gen).mul_(0.01).to(DEVICE).requires_grad_() for n in sizes]
    nus = [torch.rand(n, generator=gen).mul_(1e-4).to(DEVICE).requires_grad_() for n in sizes]
    weights = [torch.randn(n, generator=gen).to(DEVICE) for n in sizes]
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

    fns: dict[str, object] = {"fused_optim": ours, "op-by-op": op_by_op}
    adam_op_cls, note = torchopt_adam_op()
    fns["torchopt AdamOp"] = note
    if adam_op_cls is not None:
        op, count = adam_op_cls(b1=B1, b2=B2, eps=EPS, eps_root=0.0, inplace=False), torch.tensor(3)

        def adam_op():
            outs = [op(m, v, g, count) for g, m, v in zip(grads, mus, nus)]
            torch.autograd.grad(loss_of([o[2] for o in outs]), leaves)

        fns["torchopt AdamOp"] = adam_op
    scale_by_adam = torchopt_scale_by_adam()
    fns["torchopt scale_by_adam"] = "torchopt is not installed"
    if scale_by_adam is not None:
        tx = scale_by_adam(b1=B1, b2=B2, eps=EPS, eps_root=0.0, moment_requires_grad=True)
        state = tx.init(grads)
        state = state._replace(mu=type(state.mu)(mus), nu=type(state.nu)(nus))

        def plain():
            updates, _ = tx.update(grads, state, inplace=False)
            torch.autograd.grad(loss_of(updates), leaves)

        fns["torchopt scale_by_adam"] = plain
    return fns, {"peer": note}


# Adafactor's differentiable update: tensors of one shape each, vectors (full second moment) or
# a matrix (factored into row and column averages).
ADAFACTOR_DIFF_CASES = {"50 x 2e3": [(2000,)] * 50, "512 x 512": [(512, 512)]}


def adafactor_differentiable_contenders(shapes: list[tuple[int, ...]]) -> dict[str, object]:
    """Forward + backward of one Adafactor step (step 3, w.r.t. params, grads and the state) by
    fused-optim's op, the same update op by op (``fused_optim._reference``) and diffopt's plain
    ``scale_by_adafactor`` (pure PyTorch, differentiable)."""
    gen = torch.Generator().manual_seed(0)

    def leaf(shape: tuple[int, ...], positive: bool = False) -> torch.Tensor:
        t = torch.randn(shape, generator=gen)
        return (t.abs() + 1e-3 if positive else t).to(DEVICE).requires_grad_()

    params, grads = [leaf(s) for s in shapes], [leaf(s) for s in shapes]
    rows = [leaf((*s[:-1], 1), True) if len(s) > 1 else None for s in shapes]
    cols = [leaf((*s[:-2], 1, s[-1]), True) if len(s) > 1 else None for s in shapes]
    variances = [leaf(s, True) if len(s) <= 1 else None for s in shapes]
    leaves = [t for t in params + grads + rows + cols + variances if t is not None]
    factored = len(shapes[0]) > 1  # one kind per case
    weights = [torch.randn(t.shape, generator=gen).to(DEVICE) for t in params + (rows + cols if factored else variances)]

    def backward(outputs: list[torch.Tensor]) -> None:
        torch.autograd.grad(sum((t * w).sum() for t, w in zip(outputs, weights)), leaves)

    def ours() -> None:
        new = F.adafactor_update(params, grads, rows, cols, variances, 3, lr=1e-2)
        backward([t for lst in new for t in lst if t is not None])

    def op_by_op() -> None:
        state = [rows, cols, []] if factored else [[], [], variances]
        new = _reference.adafactor_update(params, grads, *state, step=3, lr=1e-2, beta2_decay=-0.8,
                                          eps1=torch.finfo(params[0].dtype).eps, eps2=1e-3, d=1.0,
                                          weight_decay=0.0, maximize=False, factored=factored)
        backward([t for lst in new for t in lst])

    fns: dict[str, object] = {"fused_optim": ours, "op-by-op": op_by_op,
                              "diffopt scale_by_adafactor": "diffopt is not installed"}
    try:
        from diffopt.transform.adafactor import ScaleByAdafactorState, scale_by_adafactor
    except ImportError:
        return fns
    tx = scale_by_adafactor(lr=1e-2)
    empty = torch.zeros(0, device=DEVICE)
    state = ScaleByAdafactorState(rows if factored else variances, cols if factored else [empty] * len(shapes),
                                  torch.tensor(2))

    def plain() -> None:
        updates, new = tx.update(grads, state, params=params)
        backward([p + u for p, u in zip(params, updates)] + list(new.row_var) + (list(new.col_var) if factored else []))

    fns["diffopt scale_by_adafactor"] = plain
    return fns


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _suite

    sys.exit(_suite.run_suite(Path(__file__).with_name("test_optim.py"), sys.argv[1:]))
