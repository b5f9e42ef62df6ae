"""Solve ``A x = b`` by conjugate gradient (``A`` symmetric positive definite)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diffopt import linalg
from diffopt.linear_solve._utils import check_ridge, split_call, with_ridge

__all__ = ["solve_cg"]


def solve_cg(
    matvec: Callable[[Any], Any] | Any = None,
    b: Any = None,
    /,
    *,
    ridge: float | None = None,
    init: Any = None,
    rtol: float = 1e-5,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: Callable[[Any], Any] | Any = None,
    tol: float | None = None,
    **bound: Any,
) -> Any:
    r"""Solve ``(A + ridge I) x = b`` by conjugate gradient, ``A`` symmetric positive definite.

    In implicit differentiation ``A`` is the transposed Jacobian of the optimality condition, which
    is the (symmetric) Hessian of the inner objective when the condition is its gradient; CG is
    then the cheapest exact-in-the-limit choice. For an operator that is not symmetric positive
    definite use :func:`solve_normal_cg`, or add a ``ridge``.

    Called without ``matvec`` and ``b`` by position it returns the configured solver
    ``(matvec, b) -> x`` (keyword ``matvec=``/``b=`` become its defaults, as in TorchOpt).

    Args:
        matvec: the product ``x -> A x`` on pytrees shaped like ``b`` (or a square matrix, or a
            pytree of them, see :func:`diffopt.linalg.utils.normalize_matvec`).
        b: right-hand side, a tensor or pytree of tensors.
        **bound: ``matvec=`` and ``b=`` by keyword, as TorchOpt's factories take them: the call
            then returns the solver with these as its defaults instead of solving.
        ridge: optional ridge :math:`\lambda`, solving :math:`(A + \lambda I) x = b`.
        init: starting guess with the structure of ``b`` (default: zeros).
        rtol: relative tolerance on the residual norm (see :func:`diffopt.linalg.cg`).
        atol: absolute tolerance on the residual norm.
        maxiter: maximum number of CG iterations (default: ``10 * size(b)``).
        M: preconditioner approximating ``A^{-1}`` (callable or matrix).
        tol: alias of ``rtol`` (TorchOpt's documentation examples spell it so).

    Returns:
        The solution (a tree like ``b``), or, without ``matvec`` and ``b``, the solver.

    Example:
        >>> import torch
        >>> A = {'a': 2.0 * torch.eye(3), 'b': 4.0 * torch.eye(2)}
        >>> matvec = lambda x: {'a': A['a'] @ x['a'], 'b': A['b'] @ x['b']}
        >>> solver = solve_cg(ridge=2.0)
        >>> x = solver(matvec, {'a': torch.ones(3), 'b': torch.ones(2)})
        >>> x['a'], x['b']
        (tensor([0.2500, 0.2500, 0.2500]), tensor([0.1667, 0.1667]))
    """
    check_ridge(ridge)
    if tol is not None:
        rtol = tol
    options = {"ridge": ridge, "init": init, "rtol": rtol, "atol": atol, "maxiter": maxiter, "M": M}
    solver, matvec, b = split_call("solve_cg", solve_cg, options, matvec, b, bound)
    if solver is not None:
        return solver
    return linalg.cg(
        with_ridge(matvec, ridge), b, x0=init, rtol=rtol, atol=atol, maxiter=maxiter, M=M
    )
