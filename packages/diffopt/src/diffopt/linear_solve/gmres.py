"""Solve ``A x = b`` for a general ``A`` by restarted GMRES."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diffopt import linalg
from diffopt.linear_solve._utils import check_ridge, split_call, with_ridge

__all__ = ["solve_gmres"]


def solve_gmres(
    matvec: Callable[[Any], Any] | Any = None,
    b: Any = None,
    /,
    *,
    ridge: float | None = None,
    init: Any = None,
    rtol: float = 1e-5,
    atol: float = 0.0,
    restart: int = 20,
    maxiter: int | None = None,
    M: Callable[[Any], Any] | Any = None,
    tol: float | None = None,
    **bound: Any,
) -> Any:
    r"""Solve ``(A + ridge I) x = b`` by restarted GMRES, ``A`` any square invertible operator.

    The Krylov solver for the non-symmetric systems of implicit differentiation, such as
    ``(I - J_f)^T u = v`` at a fixed point of ``f``
    (:func:`diffopt.diff.implicit.custom_fixed_point`): one product with ``A`` per iteration,
    no transpose and no squared condition number (unlike :func:`solve_normal_cg`), and memory
    bounded by ``restart``. Stopping short of the tolerance after ``maxiter`` steps warns with
    :class:`diffopt.linalg.ConvergenceWarning`. See :func:`diffopt.linalg.gmres`.

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
        rtol: relative tolerance on the residual norm.
        atol: absolute tolerance on the residual norm.
        restart: Krylov vectors per cycle before GMRES restarts (its memory).
        maxiter: maximum number of GMRES steps over all cycles (default: ``10 * size(b)``).
        M: right preconditioner approximating ``A^{-1}`` (callable or matrix).
        tol: alias of ``rtol``.

    Returns:
        The solution (a tree like ``b``), or, without ``matvec`` and ``b``, the solver.

    Example:
        >>> import torch
        >>> A = torch.tensor([[1.0, 2.0], [-1.0, 1.0]], dtype=torch.float64)  # not symmetric
        >>> b = {'x': torch.tensor([3.0, 0.0], dtype=torch.float64)}
        >>> solver = solve_gmres(rtol=1e-12)
        >>> x = solver(lambda v: {'x': A @ v['x']}, b)
        >>> torch.round(x['x'], decimals=6)
        tensor([1., 1.], dtype=torch.float64)
    """
    check_ridge(ridge)
    if tol is not None:
        rtol = tol
    options = {"ridge": ridge, "init": init, "rtol": rtol, "atol": atol, "restart": restart,
               "maxiter": maxiter, "M": M}
    solver, matvec, b = split_call("solve_gmres", solve_gmres, options, matvec, b, bound)
    if solver is not None:
        return solver
    return linalg.gmres(with_ridge(matvec, ridge), b, x0=init, rtol=rtol, atol=atol,
                        restart=restart, maxiter=maxiter, M=M)
