"""Solve ``A x = b`` for a general ``A`` by conjugate gradient on the normal equations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diffopt import linalg
from diffopt.linear_solve._utils import check_ridge, split_call, transpose, with_ridge

__all__ = ["solve_normal_cg"]


def solve_normal_cg(
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
    r"""Solve ``A x = b`` through the normal equations ``(A^T A + ridge I) x = A^T b`` by CG.

    Works for any square invertible ``A`` (not only symmetric positive definite ones), at the
    price of squaring its condition number and of two products per iteration. The transpose
    ``A^T`` is obtained from ``matvec`` by reverse-mode autograd, so ``matvec`` must be built from
    differentiable torch operations. This is the default solver of
    :func:`diffopt.diff.implicit.custom_root`, as in TorchOpt and JAXopt.

    Called without ``matvec`` and ``b`` by position it returns the configured solver
    ``(matvec, b) -> x`` (keyword ``matvec=``/``b=`` become its defaults, as in TorchOpt).

    Args:
        matvec: the product ``x -> A x`` on pytrees shaped like ``b`` (or a square matrix, or a
            pytree of them, see :func:`diffopt.linalg.utils.normalize_matvec`).
        b: right-hand side, a tensor or pytree of tensors.
        **bound: ``matvec=`` and ``b=`` by keyword, as TorchOpt's factories take them: the call
            then returns the solver with these as its defaults instead of solving.
        ridge: optional ridge :math:`\lambda`, solving :math:`(A^T A + \lambda I) x = A^T b`.
        init: starting guess (default: zeros shaped like ``b``).
        rtol: relative tolerance on the normal-equation residual norm.
        atol: absolute tolerance on the normal-equation residual norm.
        maxiter: maximum number of CG iterations (default: ``10 * size(b)``).
        M: preconditioner approximating ``(A^T A)^{-1}``.
        tol: alias of ``rtol`` (TorchOpt's documentation examples spell it so).

    Returns:
        The solution (a tree like ``b``), or, without ``matvec`` and ``b``, the solver.

    Example:
        >>> import torch
        >>> A = torch.tensor([[1.0, 2.0], [-1.0, 1.0]], dtype=torch.float64)  # not symmetric
        >>> b = torch.tensor([3.0, 0.0], dtype=torch.float64)
        >>> x = solve_normal_cg(lambda v: A @ v, b, rtol=1e-12)
        >>> torch.allclose(x, torch.ones(2, dtype=torch.float64))
        True
    """
    check_ridge(ridge)
    if tol is not None:
        rtol = tol
    options = {"ridge": ridge, "init": init, "rtol": rtol, "atol": atol, "maxiter": maxiter, "M": M}
    solver, matvec, b = split_call("solve_normal_cg", solve_normal_cg, options, matvec, b,
                                   bound)
    if solver is not None:
        return solver
    rmatvec = transpose(matvec, b if init is None else init)
    normal_matvec = with_ridge(lambda x: rmatvec(matvec(x)), ridge)
    return linalg.cg(normal_matvec, rmatvec(b), x0=init, rtol=rtol, atol=atol, maxiter=maxiter, M=M)
