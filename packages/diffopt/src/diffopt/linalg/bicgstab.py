"""BiCGSTAB for ``A x = b`` with a general (non-symmetric) ``A``, on pytrees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diffopt.linalg._krylov import (
    check_finite,
    prepare,
    threshold,
    warn_not_converged,
)

__all__ = ["bicgstab"]


def bicgstab(
    A: Callable[[Any], Any] | Any,
    b: Any,
    x0: Any = None,
    *,
    rtol: float = 1e-5,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: Callable[[Any], Any] | Any = None,
) -> Any:
    r"""Solve ``A x = b`` by BiCGSTAB, the stabilized bi-conjugate gradient (van der Vorst, 1992).

    For any square invertible ``A``: two products with ``A`` per iteration and a fixed handful of
    vectors of memory, however many iterations it takes (GMRES's memory grows with its restart
    length). Its residual does not decrease monotonically; when the method breaks down (a
    vanishing inner product) it restarts from the current iterate with a fresh shadow residual.
    Iteration stops when :math:`\lVert b - A x\rVert \le \max(\mathrm{rtol}\,\lVert b\rVert,
    \mathrm{atol})` or after ``maxiter`` iterations; stopping short of the tolerance warns with
    :class:`ConvergenceWarning`. The preconditioner acts on the right.

    ``b`` and the solution are tensors or pytrees of tensors; the inner product is the real one
    (complex leaves are iterated as pairs of real numbers). The iterations are ordinary
    differentiable torch operations.

    Args:
        A: callable ``A(x)`` returning a tree like ``x``, or a matrix / pytree of matrices.
        b: right-hand side, a tensor or pytree of tensors.
        x0: starting guess with the structure of ``b`` (default: zeros).
        rtol: relative tolerance on the residual norm.
        atol: absolute tolerance on the residual norm.
        maxiter: maximum number of iterations, two products with ``A`` each (default:
            ``10 * size(b)``).
        M: right preconditioner approximating ``A^{-1}``, given like ``A`` (default: none).

    Returns:
        The approximate solution, with the structure of ``b``.

    Raises:
        ValueError: for negative tolerances, a bad ``maxiter``, or ``x0`` / ``A(x)`` not shaped
            like ``b``.
        FloatingPointError: if the iteration produces a non-finite value.

    Warns:
        ConvergenceWarning: if it stopped short of the tolerance (``maxiter`` iterations, or a
            breakdown it cannot restart from).

    Example:
        >>> import torch
        >>> A = torch.tensor([[2.0, 1.0], [-1.0, 3.0]], dtype=torch.float64)  # not symmetric
        >>> b = torch.tensor([3.0, 2.0], dtype=torch.float64)
        >>> x = bicgstab(A, b, rtol=1e-12)
        >>> torch.round(x, decimals=6)
        tensor([1., 1.], dtype=torch.float64)
    """
    space, matvec, precondition, b, maxiter = prepare(A, b, M, rtol, atol, maxiter)

    def apply_m(v: Any) -> Any:
        return v if precondition is None else precondition(v)

    if x0 is None:
        x, r = space.zeros(), b
    else:
        x = space.vector(x0, "x0")
        r = space.sub(b, matvec(x))
    target = threshold(rtol, atol, float(space.norm(b).detach()))
    residual = float(space.norm(r).detach())
    check_finite("bicgstab", residual)

    iterations = 0
    fresh = True  # at a (re)start: the shadow residual is the current residual
    while residual > target and iterations < maxiter:
        if fresh:
            shadow, p, rho = r, r, space.dot(r, r)
        iterations += 1
        p_hat = apply_m(p)
        v = matvec(p_hat)
        shadow_v = space.dot(shadow, v)
        if float(shadow_v.detach()) == 0.0:
            if fresh:
                break  # (r, A M r) = 0 for a fresh r: no progress possible along r
            fresh = True
            continue
        alpha = rho / shadow_v
        s = space.scaled_sub(r, v, alpha)
        s_norm = float(space.norm(s).detach())
        check_finite("bicgstab", s_norm)
        if s_norm <= target:
            x, residual = space.scaled_add(x, p_hat, alpha), s_norm
            break
        s_hat = apply_m(s)
        t = matvec(s_hat)
        tt = space.dot(t, t)
        omega = space.dot(t, s) / tt if float(tt.detach()) > 0.0 else tt
        x = space.scaled_add(space.scaled_add(x, p_hat, alpha), s_hat, omega)
        r = space.scaled_sub(s, t, omega)
        residual = float(space.norm(r).detach())
        check_finite("bicgstab", residual)
        rho_next = space.dot(shadow, r)
        if float(omega.detach()) == 0.0 or float(rho_next.detach()) == 0.0:
            fresh = True  # breakdown: restart with the current residual as the new shadow
            continue
        beta = (rho_next / rho) * (alpha / omega)
        p = space.scaled_add(r, space.scaled_sub(p, v, omega), beta)
        rho = rho_next
        fresh = False
    if residual > target:
        warn_not_converged("bicgstab", iterations, residual, target)
    return space.tree(x)
