"""Solve ``A x = b`` exactly by factoring the materialized matrix of ``A``: LU or Cholesky."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from diffopt.linalg._operator import check_rhs
from diffopt.linear_solve._utils import (
    check_ridge,
    materialize,
    ravel,
    split_call,
    unraveler,
    with_ridge,
)

__all__ = ["solve_cholesky", "solve_lu"]


def lu_solve(matvec: Callable[[Any], Any], b: Any) -> Any:
    """``A^{-1} b`` by LU of the matrix of ``matvec`` (built with one product per unknown)."""
    check_rhs(b)
    return unraveler(b)(torch.linalg.solve(materialize(matvec, b), ravel(b)))


def _symmetric_part(matrix: torch.Tensor) -> torch.Tensor:
    """``(A + A^H) / 2``, after checking that ``A`` is Hermitian up to rounding.

    Cholesky reads one triangle only, so a non-symmetric matrix would be solved silently wrong.
    The matrix of a Hessian-vector product is symmetric only up to the rounding of the products,
    hence the relative tolerance (the square root of the dtype's epsilon).
    """
    scale = float(matrix.abs().max().detach()) if matrix.numel() else 0.0
    asymmetry = float((matrix - matrix.mH).abs().max().detach()) if matrix.numel() else 0.0
    tolerance = torch.finfo(matrix.dtype).eps ** 0.5 * scale
    if asymmetry > tolerance:
        raise ValueError(
            "solve_cholesky: the operator is not symmetric (max |A - A^T| = "
            f"{asymmetry:.3g}, for max |A| = {scale:.3g}); use solve_lu for a general matrix"
        )
    return (matrix + matrix.mH) / 2


def solve_lu(
    matvec: Callable[[Any], Any] | Any = None,
    b: Any = None,
    /,
    *,
    ridge: float | None = None,
    init: Any = None,
    **bound: Any,
) -> Any:
    r"""Solve ``(A + ridge I) x = b`` exactly by LU factorization, ``A`` any invertible operator.

    The matrix of ``A`` is materialized with one ``matvec`` per unknown (every leaf of ``b``
    flattened and concatenated) and solved by :func:`torch.linalg.solve` (LU with partial
    pivoting): exact up to rounding, and meant for small problems (up to a few thousand
    unknowns). Its backward use in :func:`diffopt.diff.implicit.custom_root` then costs one
    vector-Jacobian product per unknown. A singular matrix raises torch's error.

    Called without ``matvec`` and ``b`` by position it returns the configured solver
    ``(matvec, b) -> x`` (keyword ``matvec=``/``b=`` become its defaults, as in TorchOpt).

    Args:
        matvec: the product ``x -> A x`` on pytrees shaped like ``b`` (or a square matrix, or a
            pytree of them, see :func:`diffopt.linalg.utils.normalize_matvec`).
        b: right-hand side, a tensor or pytree of tensors.
        **bound: ``matvec=`` and ``b=`` by keyword, as TorchOpt's factories take them: the call
            then returns the solver with these as its defaults instead of solving.
        ridge: optional ridge :math:`\lambda`, solving :math:`(A + \lambda I) x = b`.
        init: accepted for a uniform solver interface and ignored (a direct solve needs no
            starting guess).

    Returns:
        The solution (a tree like ``b``), or, without ``matvec`` and ``b``, the solver.

    Example:
        >>> import torch
        >>> A = torch.tensor([[0.0, 2.0], [4.0, 0.0]], dtype=torch.float64)  # needs pivoting
        >>> b = {'u': torch.tensor([2.0], dtype=torch.float64),
        ...      'v': torch.tensor([8.0], dtype=torch.float64)}
        >>> x = solve_lu(lambda t: dict(zip('uv', (A @ torch.cat([t['u'], t['v']])).split(1))), b)
        >>> x['u'], x['v']
        (tensor([2.], dtype=torch.float64), tensor([1.], dtype=torch.float64))
    """
    check_ridge(ridge)
    options = {"ridge": ridge, "init": init}
    solver, matvec, b = split_call("solve_lu", solve_lu, options, matvec, b, bound)
    if solver is not None:
        return solver
    return lu_solve(with_ridge(matvec, ridge), b)


def solve_cholesky(
    matvec: Callable[[Any], Any] | Any = None,
    b: Any = None,
    /,
    *,
    ridge: float | None = None,
    init: Any = None,
    **bound: Any,
) -> Any:
    r"""Solve ``(A + ridge I) x = b`` exactly by Cholesky, ``A`` symmetric positive definite.

    The matrix of ``A`` is materialized as in :func:`solve_lu` and factored by
    :func:`torch.linalg.cholesky`: half LU's work, for the symmetric systems of implicit
    differentiation through an argmin (the Hessian of the inner objective). An operator that is
    not symmetric (beyond rounding) or not positive definite raises a :class:`ValueError`
    naming the problem; add a ``ridge`` or use :func:`solve_lu`.

    Called without ``matvec`` and ``b`` by position it returns the configured solver
    ``(matvec, b) -> x`` (keyword ``matvec=``/``b=`` become its defaults, as in TorchOpt).

    Args:
        matvec: the product ``x -> A x`` on pytrees shaped like ``b`` (or a square matrix, or a
            pytree of them, see :func:`diffopt.linalg.utils.normalize_matvec`).
        b: right-hand side, a tensor or pytree of tensors.
        **bound: ``matvec=`` and ``b=`` by keyword, as TorchOpt's factories take them: the call
            then returns the solver with these as its defaults instead of solving.
        ridge: optional ridge :math:`\lambda`, solving :math:`(A + \lambda I) x = b`.
        init: accepted for a uniform solver interface and ignored.

    Returns:
        The solution (a tree like ``b``), or, without ``matvec`` and ``b``, the solver.

    Raises:
        ValueError: if the operator is not symmetric or not positive definite.

    Example:
        >>> import torch
        >>> A = torch.tensor([[4.0, 2.0], [2.0, 3.0]], dtype=torch.float64)
        >>> b = torch.tensor([6.0, 5.0], dtype=torch.float64)
        >>> torch.round(solve_cholesky(lambda v: A @ v, b), decimals=6)
        tensor([1., 1.], dtype=torch.float64)
    """
    check_ridge(ridge)
    options = {"ridge": ridge, "init": init}
    solver, matvec, b = split_call("solve_cholesky", solve_cholesky, options, matvec, b, bound)
    if solver is not None:
        return solver
    check_rhs(b)
    matrix = _symmetric_part(materialize(with_ridge(matvec, ridge), b))
    factor, info = torch.linalg.cholesky_ex(matrix)
    if int(info) != 0:
        raise ValueError(
            "solve_cholesky: the operator is not positive definite (the Cholesky factorization "
            f"failed at column {int(info)}); add a ridge, or use solve_lu"
        )
    x = torch.cholesky_solve(ravel(b).unsqueeze(1), factor).squeeze(1)
    return unraveler(b)(x)
