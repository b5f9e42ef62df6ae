"""Operator plumbing shared by the linear solvers: ridge terms, transposes, dense matrices, and
the vector-Jacobian product that implicit differentiation's operators are built from."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

import optree_core
from diffopt import tree_math
from diffopt.linalg._operator import as_linear_operator, check_like

__all__: list[str] = []

Matvec = Callable[[Any], Any]

# The engine call torch.autograd.grad ends in (private; torch.autograd.grad where it is missing).
_run_backward = getattr(torch.autograd.graph, "_engine_run_backward", None)


def vjp(outputs: list[torch.Tensor], inputs: list[torch.Tensor], cotangents: list[torch.Tensor],
        *, retain_graph: bool) -> list[torch.Tensor]:
    """``d sum_i <outputs_i, cotangents_i> / d inputs`` over autograd's recorded graph.

    Outputs that do not require grad are left out and inputs they do not reach get zeros. The
    result carries a graph when grad mode is on (a double backward of the caller's backward).
    Plain tensors whose cotangents are shaped like their outputs go straight to the engine call
    that ``torch.autograd.grad`` ends in: its own argument checks (symbolic-shape comparisons,
    ~10 us a leaf on CPU) would be paid once or twice per Krylov iteration, and the engine
    validates cotangents' shape, dtype and device itself. Anything else (tensor subclasses, a
    ``__torch_function__`` mode, mismatched shapes, which get torch's error) takes
    ``torch.autograd.grad``.
    """
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(x) for x in inputs]
    roots = tuple(o for o, _ in pairs)
    grads_out = tuple(c for _, c in pairs)
    inputs = tuple(inputs)
    create_graph = torch.is_grad_enabled()
    tensors = (*roots, *grads_out, *inputs)
    if (
        _run_backward is not None
        and all(type(t) is torch.Tensor for t in tensors)
        and not torch.overrides.has_torch_function(tensors)
        and all(o.shape == c.shape for o, c in pairs)
    ):
        grads = _run_backward(roots, grads_out, retain_graph, create_graph, inputs, True,
                              accumulate_grad=False)
    else:
        grads = torch.autograd.grad(roots, inputs, grad_outputs=grads_out,
                                    retain_graph=retain_graph, create_graph=create_graph,
                                    allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


def check_ridge(ridge: float | None) -> None:
    if ridge is None:
        return
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not math.isfinite(ridge):
        raise ValueError(f"ridge must be a finite number or None, got {ridge!r}")
    if ridge < 0:
        raise ValueError(f"ridge must be non-negative, got {ridge!r}")


def split_call(name: str, factory: Callable, options: dict[str, Any], matvec: Any, b: Any,
               bound: dict[str, Any]) -> tuple[Callable | None, Any, Any]:
    """The call convention the ``solve_*`` factories share: ``(solver, matvec, b)``.

    With ``matvec`` and ``b`` given positionally the call solves at once: ``solver`` is None and
    ``matvec`` is the operator as a callable (a matrix or pytree of matrices is accepted, see
    :func:`diffopt.linalg.utils.normalize_matvec`). With neither given positionally it returns
    the configured ``solver(matvec, b)``; ``matvec=`` and ``b=`` given by keyword become that
    solver's defaults, which a later call may override (TorchOpt's factories bind them so).
    """
    unknown = sorted(set(bound) - {"matvec", "b"})
    if unknown:
        raise TypeError(f"{name}() got unexpected keyword argument(s) {unknown}")
    if matvec is None and b is None:
        default_matvec, default_b = bound.get("matvec"), bound.get("b")

        def solver(matvec: Any = default_matvec, b: Any = default_b) -> Any:
            return factory(matvec, b, **options)

        solver.__name__ = solver.__qualname__ = name
        return solver, None, None
    for key, positional in (("matvec", matvec), ("b", b)):
        if key in bound and positional is not None:
            raise TypeError(f"{name}() got {key} both by position and by keyword")
    matvec, b = bound.get("matvec", matvec), bound.get("b", b)
    if matvec is None:
        raise TypeError(f"{name}: missing the operator matvec (call {name}(matvec, b))")
    if b is None:
        raise TypeError(f"{name}: missing the right-hand side b (call {name}(matvec, b))")
    return None, as_linear_operator(matvec, "matvec"), b


def with_ridge(matvec: Matvec, ridge: float | None) -> Matvec:
    """``x -> A x + ridge * x`` (``matvec`` itself when ``ridge`` is None or 0)."""
    if not ridge:
        return matvec
    return lambda x: tree_math.tree_add_scalar_mul(matvec(x), x, ridge)


def transpose(matvec: Matvec, example: Any) -> Matvec:
    """The transpose ``w -> A^T w`` of the linear map ``matvec``, by reverse-mode autograd.

    ``matvec`` is applied once to zeros that require grad; for a linear map the vector-Jacobian
    product of that output with ``w`` is ``A^T w``. ``matvec`` must therefore be built from
    differentiable torch operations.
    """
    inputs = tree_math.tree_zeros_like(example, requires_grad=True)
    with torch.enable_grad():
        outputs = matvec(inputs)
    input_leaves = optree_core.tree_leaves(inputs)
    output_leaves, output_spec = optree_core.tree_flatten(outputs)
    if not any(isinstance(leaf, torch.Tensor) and leaf.requires_grad for leaf in output_leaves):
        raise RuntimeError(
            "solve_normal_cg needs the transpose of matvec, which it computes by autograd, but "
            "matvec's output does not depend differentiably on its input: build matvec from "
            "differentiable torch operations (or use solve_cg for a symmetric operator)"
        )

    input_spec = optree_core.tree_structure(inputs)

    def rmatvec(w: Any) -> Any:
        w_leaves, w_spec = optree_core.tree_flatten(w)
        if w_spec != output_spec:
            raise ValueError(f"transpose: expected a tree like {output_spec}, got {w_spec}")
        grads = vjp(output_leaves, input_leaves, w_leaves, retain_graph=True)
        return optree_core.tree_unflatten(input_spec, grads)

    return rmatvec


def ravel(tree: Any) -> torch.Tensor:
    """All leaves flattened and concatenated into one vector."""
    return torch.cat([leaf.reshape(-1) for leaf in optree_core.tree_leaves(tree)])


def unraveler(example: Any) -> Callable[[torch.Tensor], Any]:
    """The inverse of :func:`ravel` for trees shaped like ``example``."""
    leaves, treespec = optree_core.tree_flatten(example)
    sizes = [leaf.numel() for leaf in leaves]

    def unravel(flat: torch.Tensor) -> Any:
        chunks = torch.split(flat, sizes)
        parts = [chunk.reshape(leaf.shape).to(leaf.dtype) for chunk, leaf in zip(chunks, leaves)]
        return optree_core.tree_unflatten(treespec, parts)

    return unravel


def materialize(matvec: Matvec, example: Any) -> torch.Tensor:
    """The dense matrix of ``matvec`` on trees shaped like ``example`` (one product per column)."""
    flat = ravel(example)
    unravel = unraveler(example)
    eye = torch.eye(flat.numel(), dtype=flat.dtype, device=flat.device)
    columns = []
    for column in eye:
        out = matvec(unravel(column))
        check_like(out, example, "the output of matvec")
        columns.append(ravel(out))
    return torch.stack(columns, dim=1)
