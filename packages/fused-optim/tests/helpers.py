"""Shared fixtures: sample inputs for every functional op and tolerances."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fused_optim
from fused_optim.ops import apply_functional

SHAPES = [(), (5,), (2, 3)]

# Each input list of a functional op is one of these kinds: they set the value range (state that
# must be non-negative, such as second moments, or bounded away from kinks such as max/abs).
PARAM, GRAD, ANY, POS, EMPTY, UNIT = "param", "grad", "any", "pos", "empty", "unit"
# Positive state shaped like a matrix's row (last dimension reduced to 1) or column averages.
ROWS, COLS = "rows", "cols"
MATRIX_SHAPES = [(2, 3), (4, 2), (2, 2, 3)]


@dataclass
class FunctionalCase:
    """One functional op call: ``torch.ops.fused_optim.<op>(*lists, **kwargs)``."""

    op: str
    kinds: tuple[str, ...]
    kwargs: dict[str, Any]
    id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    matrices: bool = False  # params of two or more dimensions only (Adafactor's factored case)

    def make(self, dtype: torch.dtype = torch.float64, shapes: list[tuple[int, ...]] | None = None,
             seed: int = 0) -> list[list[torch.Tensor]]:
        gen = torch.Generator().manual_seed(seed)
        if self.matrices:  # a requested vector shape (n,) becomes (2, n)
            shapes = [s if len(s) >= 2 else (2, *(s or (3,))) for s in shapes] if shapes else MATRIX_SHAPES
        shapes = shapes or SHAPES
        lists = []
        for kind in self.kinds:
            if kind == EMPTY:
                lists.append([])
                continue
            lst = []
            for shape in shapes:
                if kind in (ROWS, COLS):
                    shape = (*shape[:-1], 1) if kind == ROWS else (*shape[:-2], 1, shape[-1])
                x = torch.randn(shape, generator=gen, dtype=torch.float64)
                if kind in (POS, ROWS, COLS):
                    x = x.abs() + 0.5
                elif kind == UNIT:
                    x = 0.3 * torch.tanh(x)
                lst.append(x.to(dtype))
            lists.append(lst)
        return lists


def _cases() -> list[FunctionalCase]:
    cases = []
    sgd = ("sgd_update", dict(lr=0.1, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False))
    for momentum, first, nesterov, damp, wd, maximize in [
        (0.0, False, False, 0.0, 0.0, False), (0.0, False, False, 0.0, 0.1, True),
        (0.9, True, False, 0.0, 0.1, False), (0.9, False, False, 0.2, 0.1, True),
        (0.9, False, True, 0.0, 0.0, False), (0.9, True, True, 0.0, 0.1, True),
    ]:
        kw = dict(sgd[1], momentum=momentum, first_step=first, nesterov=nesterov, dampening=damp,
                  weight_decay=wd, maximize=maximize)
        bufs = EMPTY if momentum == 0 or first else ANY
        cases.append(FunctionalCase("sgd_update", (PARAM, GRAD, bufs), kw, f"sgd-m{momentum}-f{first}-n{nesterov}"))
    for amsgrad, wd, decoupled, maximize, step in [
        (False, 0.0, False, False, 1), (True, 0.1, False, True, 3), (False, 0.1, True, False, 7),
        (True, 0.2, True, True, 2),
    ]:
        kw = dict(step=step, lr=0.05, beta1=0.9, beta2=0.99, weight_decay=wd, eps=1e-3, amsgrad=amsgrad,
                  maximize=maximize, decoupled_weight_decay=decoupled)
        cases.append(FunctionalCase("adam_update", (PARAM, GRAD, ANY, POS, POS if amsgrad else EMPTY), kw,
                                    f"adam-a{amsgrad}-wd{wd}-d{decoupled}-mx{maximize}"))
    for eps_root, step in [(0.0, 1), (1e-4, 5)]:
        kw = dict(step=step, beta1=0.9, beta2=0.999, eps=1e-3, eps_root=eps_root)
        cases.append(FunctionalCase("adam_direction", (GRAD, ANY, POS), kw, f"direction-er{eps_root}"))
    for centered, momentum, wd, maximize in [(False, 0.0, 0.0, False), (True, 0.0, 0.1, True),
                                             (False, 0.9, 0.1, False), (True, 0.9, 0.0, True)]:
        kw = dict(lr=0.01, alpha=0.9, eps=1e-3, weight_decay=wd, momentum=momentum, centered=centered,
                  maximize=maximize)
        kinds = (PARAM, GRAD, POS, UNIT if centered else EMPTY, ANY if momentum else EMPTY)
        cases.append(FunctionalCase("rmsprop_update", kinds, kw, f"rmsprop-c{centered}-m{momentum}"))
    for lr_decay, wd, maximize in [(0.0, 0.0, False), (0.1, 0.1, True)]:
        kw = dict(step=3, lr=0.1, lr_decay=lr_decay, weight_decay=wd, eps=1e-3, maximize=maximize)
        cases.append(FunctionalCase("adagrad_update", (PARAM, GRAD, POS), kw, f"adagrad-ld{lr_decay}"))
    for wd, maximize in [(0.0, False), (0.1, True)]:
        kw = dict(lr=1.0, rho=0.9, eps=1e-3, weight_decay=wd, maximize=maximize)
        cases.append(FunctionalCase("adadelta_update", (PARAM, GRAD, POS, POS), kw, f"adadelta-wd{wd}"))
    for wd, maximize in [(0.0, False), (0.1, True)]:
        kw = dict(step=2, lr=0.02, beta1=0.9, beta2=0.999, eps=1e-3, weight_decay=wd, maximize=maximize)
        cases.append(FunctionalCase("adamax_update", (PARAM, GRAD, ANY, POS), kw, f"adamax-wd{wd}"))
    for step, wd, decoupled, maximize in [(2, 0.0, False, False), (10, 0.1, False, True), (10, 0.1, True, False)]:
        kw = dict(step=step, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-3, weight_decay=wd,
                  decoupled_weight_decay=decoupled, maximize=maximize)
        cases.append(FunctionalCase("radam_update", (PARAM, GRAD, ANY, POS), kw, f"radam-s{step}-d{decoupled}"))
    for wd, maximize in [(0.0, False), (0.1, True)]:
        kw = dict(lr=0.1, beta1=0.9, beta2=0.99, weight_decay=wd, maximize=maximize)
        cases.append(FunctionalCase("lion_update", (PARAM, GRAD, ANY), kw, f"lion-wd{wd}-mx{maximize}"))
    # Muon's direction: both lerp formulas of each interpolation (weights below and above 0.5).
    for momentum, nesterov in [(0.95, True), (0.3, False), (0.6, True)]:
        kw = dict(momentum=momentum, nesterov=nesterov)
        cases.append(FunctionalCase("muon_direction", (GRAD, ANY), kw, f"muon-m{momentum}-n{nesterov}"))
    for step, wd, no_prox, maximize in [(1, 0.0, False, False), (3, 0.1, False, True), (2, 0.1, True, False)]:
        kw = dict(step=step, lr=0.05, beta1=0.98, beta2=0.92, beta3=0.99, eps=1e-3, weight_decay=wd,
                  no_prox=no_prox, maximize=maximize)
        cases.append(FunctionalCase("adan_update", (PARAM, GRAD, ANY, ANY, POS, GRAD), kw,
                                    f"adan-s{step}-wd{wd}-np{no_prox}"))
    # mu_product is the momentum product through this step (0.45... after the first).
    for step, product, wd, decoupled, maximize in [(1, 0.4501, 0.0, False, False), (4, 0.05, 0.1, False, True),
                                                   (9, 0.002, 0.1, True, False)]:
        kw = dict(step=step, mu_product=product, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-3, weight_decay=wd,
                  momentum_decay=6e-3, decoupled_weight_decay=decoupled, maximize=maximize)
        cases.append(FunctionalCase("nadam_update", (PARAM, GRAD, ANY, POS), kw, f"nadam-s{step}-d{decoupled}"))
    for size_max, maximize in [(50.0, False), (1.5, True)]:  # the second clamps some step sizes
        kw = dict(etaminus=0.5, etaplus=1.2, step_size_min=1e-6, step_size_max=size_max, maximize=maximize)
        cases.append(FunctionalCase("rprop_update", (PARAM, GRAD, ANY, POS), kw, f"rprop-max{size_max}"))
    for mu, lambd, wd, maximize in [(1.0, 1e-4, 0.0, False), (0.3, 0.1, 0.1, True)]:
        kw = dict(eta=0.05, mu=mu, lambd=lambd, weight_decay=wd, maximize=maximize)
        cases.append(FunctionalCase("asgd_update", (PARAM, GRAD, ANY), kw, f"asgd-mu{mu}-wd{wd}"))
    # Every branch: the update's RMS clipped (d=1) or not (d=10), RMS(p) or eps2 (5.0) as the scale,
    # lr or 1/sqrt(t) as the relative step, the floor eps1 holding some estimates (1.0) or none.
    for factored in (True, False):
        for step, lr, eps1, eps2, d, wd, maximize in [(1, 0.01, 1e-30, 1e-3, 1.0, 0.0, False),
                                                      (3, 1.0, 1e-30, 1e-3, 1.0, 0.1, True),
                                                      (2, 0.05, 1.0, 5.0, 10.0, 0.0, False)]:
            kw = dict(step=step, lr=lr, beta2_decay=-0.8 if step != 2 else -0.5, eps1=eps1, eps2=eps2, d=d,
                      weight_decay=wd, maximize=maximize, factored=factored)
            kinds = (PARAM, GRAD, ROWS, COLS, EMPTY) if factored else (PARAM, GRAD, EMPTY, EMPTY, POS)
            cases.append(FunctionalCase("adafactor_update", kinds, kw, f"adafactor-f{factored}-s{step}-d{d}",
                                        matrices=factored))
    return cases


FUNCTIONAL_CASES = _cases()


def op(name: str) -> Callable[..., Any]:
    return getattr(torch.ops.fused_optim, name).default


def called(name: str) -> Callable[..., Any]:
    """The op as fused-optim's Python side calls it through torch.ops (fused_optim._native.boxed):
    with what the stable ABI leaves to Python (the autograd checks, version bumps, TypeError)."""
    from fused_optim import _native

    return _native.boxed(op(name))


def step_args(name: str, dtype: torch.dtype = torch.float32, shapes: Sequence[tuple[int, ...]] = ((3,), (2, 2))
              ) -> tuple[tuple[list[torch.Tensor], ...], dict[str, Any]]:
    """Arguments of one call of the step op ``name``: its lists (one tensor per shape) and keyword
    arguments, most options switched on."""
    gen = torch.Generator().manual_seed(0)

    def lst(pos=False):
        out = [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]
        return [t.abs() + 0.5 for t in out] if pos else out

    def steps():
        return [torch.tensor(0.0) for _ in shapes]

    p, g = lst(), lst()
    if name == "sgd_step_":
        return (p, g, lst()), dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.1, nesterov=True,
                                   maximize=False, first_step=False)
    if name == "adam_step_":
        return (p, g, lst(), lst(True), lst(True), steps()), dict(
            lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=True,
            decoupled_weight_decay=True)
    if name == "rmsprop_step_":
        return (p, g, lst(True), [0.1 * t for t in lst()], lst(), steps()), dict(
            lr=0.01, alpha=0.9, eps=1e-8, weight_decay=0.1, momentum=0.9, centered=True, maximize=False)
    if name == "adagrad_step_":
        return (p, g, lst(True), steps()), dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, eps=1e-10,
                                                maximize=False)
    if name == "adadelta_step_":
        return (p, g, lst(True), lst(True), steps()), dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.1,
                                                          maximize=True)
    if name == "adamax_step_":
        return (p, g, lst(), lst(True), steps()), dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8,
                                                      weight_decay=0.1, maximize=False)
    if name == "radam_step_":
        return (p, g, lst(), lst(True), steps()), dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8,
                                                      weight_decay=0.1, decoupled_weight_decay=True,
                                                      maximize=False)
    if name == "lion_step_":
        return (p, g, lst(), steps()), dict(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1, maximize=True)
    if name == "adan_step_":
        return (p, g, lst(), lst(), lst(True), lst(), steps()), dict(
            lr=0.01, beta1=0.98, beta2=0.92, beta3=0.99, eps=1e-8, weight_decay=0.1, no_prox=False, maximize=False)
    if name == "nadam_step_":
        products = [torch.tensor(1.0) for _ in shapes]
        return (p, g, lst(), lst(True), products, steps()), dict(
            lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, momentum_decay=4e-3,
            decoupled_weight_decay=True, maximize=True)
    if name == "rprop_step_":
        return (p, g, lst(), [0.01 * t for t in lst(True)], steps()), dict(
            lr=0.01, etaminus=0.5, etaplus=1.2, step_size_min=1e-6, step_size_max=50.0, maximize=True)
    if name == "asgd_step_":
        etas, mus = [torch.tensor(0.01) for _ in shapes], [torch.tensor(1.0) for _ in shapes]
        return (p, g, lst(), etas, mus, steps()), dict(lr=0.01, lambd=1e-4, alpha=0.75, t0=1.0,
                                                         weight_decay=0.1, maximize=False)
    if name == "adafactor_step_":
        return (p, g, [], [], lst(True), steps()), dict(lr=0.01, beta2_decay=-0.8, eps1=1e-30, eps2=1e-3, d=1.0,
                                                        weight_decay=0.1, maximize=True, factored=False)
    raise AssertionError(name)


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    return {torch.float64: dict(rtol=1e-12, atol=1e-14), torch.float32: dict(rtol=1e-6, atol=1e-7)}.get(
        dtype, dict(rtol=2e-2, atol=2e-2))


def gradcheck_one_step(case: FunctionalCase, device: str = "cpu") -> bool:
    """gradcheck of one functional update of ``case`` in float64, every input a leaf on ``device``."""
    lists = case.make(torch.float64, shapes=[(3,), (2,)])
    sizes = [len(lst) for lst in lists]
    flat = [t.to(device, copy=True).requires_grad_() for lst in lists for t in lst]

    def fn(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        it = iter(xs)
        outs = apply_functional(case.op, [[next(it) for _ in range(n)] for n in sizes], case.kwargs)
        return tuple(t for lst in outs for t in lst)

    return torch.autograd.gradcheck(fn, flat, eps=1e-6, atol=1e-6, rtol=1e-5)


class SeenOps(TorchDispatchMode):
    """A dispatch mode that records each op it sees (``seen``) and runs it unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def two_adafactor_steps(start: Sequence[torch.Tensor], step_grads: Sequence[Sequence[torch.Tensor]],
                        device: str = "cpu") -> list[torch.Tensor]:
    """Two drop-in Adafactor steps (lr 0.05, weight decay 0.1) from copies of ``start`` on
    ``device``, with ``step_grads[k]`` as step k's gradients: the parameters, then the row averages
    of those with two or more dimensions, on the CPU."""
    params = [x.to(device, copy=True).requires_grad_() for x in start]
    opt = fused_optim.Adafactor(params, lr=0.05, weight_decay=0.1)
    for grads in step_grads:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.to(device, copy=True)
        opt.step()
    rows = [opt.state[p]["row_var"] for p in params if p.dim() >= 2]
    return [x.detach().cpu() for x in params + rows]
