"""Solve ``A x = b`` by a dense direct solve, or by a truncated Neumann series."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diffopt import linalg, tree_math
from diffopt.linalg._operator import check_like, check_rhs
from diffopt.linear_solve._utils import check_ridge, split_call, with_ridge
from diffopt.linear_solve.dense import lu_solve

__all__ = ["solve_inv"]


def solve_inv(
    matvec: Callable[[Any], Any] | Any = None,
    b: Any = None,
    /,
    *,
    ridge: float | None = None,
    init: Any = None,
    ns: bool = False,
    maxiter: int | None = None,
    alpha: float | None = None,
    **bound: Any,
) -> Any:
    r"""Solve ``(A + ridge I) x = b`` by inverting ``A``: exactly, or by a Neumann series.

    With ``ns=False`` (default) the matrix of ``A`` is materialized with one ``matvec`` per
    unknown and solved by :func:`torch.linalg.solve` (LU): exact, for any invertible ``A``, and
    meant for small problems (up to a few thousand unknowns). With ``ns=True`` it runs
    :func:`diffopt.linalg.ns`, which needs :math:`\rho(I - \alpha A) < 1`, and warns or raises
    when the series diverges.

    Called without ``matvec`` and ``b`` by position it returns the configured solver
    ``(matvec, b) -> x`` (keyword ``matvec=``/``b=`` become its defaults, as in TorchOpt).

    Args:
        matvec: the product ``x -> A x`` on pytrees shaped like ``b`` (or a square matrix, or a
            pytree of them, see :func:`diffopt.linalg.utils.normalize_matvec`).
        b: right-hand side, a tensor or pytree of tensors.
        **bound: ``matvec=`` and ``b=`` by keyword, as TorchOpt's factories take them: the call
            then returns the solver with these as its defaults instead of solving.
        ridge: optional ridge :math:`\lambda`, solving :math:`(A + \lambda I) x = b`.
        init: starting guess for the Neumann series, which then approximates the correction
            ``A^{-1}(b - A init)``; the direct solve needs none and ignores it.
        ns: use the Neumann series instead of the direct solve.
        maxiter: number of Neumann terms (products with ``A``; default 100). Only with ``ns``.
        alpha: Neumann step size (default 1). Only with ``ns``.

    Returns:
        The solution (a tree like ``b``), or, without ``matvec`` and ``b``, the solver.

    Example:
        >>> import torch
        >>> A = {'a': torch.eye(3, dtype=torch.float64), 'b': 2 * torch.eye(2, dtype=torch.float64)}
        >>> matvec = lambda x: {'a': A['a'] @ x['a'], 'b': A['b'] @ x['b']}
        >>> b = {'a': torch.ones(3, dtype=torch.float64), 'b': torch.ones(2, dtype=torch.float64)}
        >>> solve_inv(matvec, b)['b']
        tensor([0.5000, 0.5000], dtype=torch.float64)
        >>> x = solve_inv(ns=True, maxiter=60, alpha=0.5)(matvec, b)
        >>> torch.allclose(x['b'], torch.full((2,), 0.5, dtype=torch.float64))
        True
    """
    check_ridge(ridge)
    if not ns and (maxiter is not None or alpha is not None):
        raise TypeError("solve_inv: maxiter and alpha configure the Neumann series; pass ns=True")
    options = {
        "ridge": ridge,
        "init": init,
        "ns": ns,
        "maxiter": maxiter,
        "alpha": alpha,
    }
    solver, matvec, b = split_call("solve_inv", solve_inv, options, matvec, b, bound)
    if solver is not None:
        return solver
    check_rhs(b)
    matvec = with_ridge(matvec, ridge)
    if ns:
        if init is None:
            return linalg.ns(matvec, b, maxiter, alpha=alpha)
        check_like(init, b, "init")
        residual = tree_math.tree_sub(b, matvec(init))
        return tree_math.tree_add(init, linalg.ns(matvec, residual, maxiter, alpha=alpha))
    return lu_solve(matvec, b)
