"""Restarted GMRES for ``A x = b`` with a general (non-symmetric) ``A``, on pytrees."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from diffopt.linalg._krylov import (
    check_finite,
    check_tolerances,
    prepare,
    threshold,
    warn_not_converged,
)

__all__ = ["gmres"]


def _givens(a: float, b: float) -> tuple[float, float]:
    """``(c, s)`` with ``[c s; -s c] [a; b] = [r; 0]``."""
    r = math.hypot(a, b)
    return (1.0, 0.0) if r == 0.0 else (a / r, b / r)


def _least_squares(hessenberg: list[list[torch.Tensor]], beta: torch.Tensor) -> torch.Tensor:
    """``argmin_y ||beta e1 - H y||`` for the (k+1) x k Hessenberg matrix of one cycle.

    Solved from H's QR factorization in torch, so gradients flow through it like through the
    rest of the iteration (the Givens rotations that track the residual work on Python floats).
    """
    k = len(hessenberg)
    zero = beta.new_zeros(())
    columns = [torch.stack(column + [zero] * (k + 1 - len(column))) for column in hessenberg]
    h = torch.stack(columns, dim=1)
    q, r = torch.linalg.qr(h)
    rhs = beta * q[0]
    return torch.linalg.solve_triangular(r, rhs.unsqueeze(1), upper=True).squeeze(1)


def gmres(
    A: Callable[[Any], Any] | Any,
    b: Any,
    x0: Any = None,
    *,
    rtol: float = 1e-5,
    atol: float = 0.0,
    restart: int = 20,
    maxiter: int | None = None,
    M: Callable[[Any], Any] | Any = None,
) -> Any:
    r"""Solve ``A x = b`` by restarted GMRES (any square invertible ``A``).

    Each cycle builds an orthonormal basis of the Krylov space of the current residual by Arnoldi
    (modified Gram-Schmidt) and picks the iterate of least residual norm in it; after ``restart``
    products with ``A`` it starts again from the current iterate, which bounds the memory at
    ``restart + 1`` vectors shaped like ``b``. Unlike CG it needs no symmetry, and unlike
    normal-equation CG it does not square ``A``'s condition number nor need ``A^T``. Iteration
    stops when :math:`\lVert b - A x\rVert \le \max(\mathrm{rtol}\,\lVert b\rVert,
    \mathrm{atol})` or after ``maxiter`` Arnoldi steps; stopping short of the tolerance warns
    with :class:`ConvergenceWarning`. The preconditioner acts on the right (``A M y = b``,
    ``x = M y``), so the tolerance applies to the true residual.

    ``b`` and the solution are tensors or pytrees of tensors; the inner product is the real one
    (complex leaves are iterated as pairs of real numbers). The iterations are ordinary
    differentiable torch operations.

    Args:
        A: callable ``A(x)`` returning a tree like ``x``, or a matrix / pytree of matrices.
        b: right-hand side, a tensor or pytree of tensors.
        x0: starting guess with the structure of ``b`` (default: zeros).
        rtol: relative tolerance on the residual norm.
        atol: absolute tolerance on the residual norm.
        restart: Krylov vectors per cycle (the memory: ``restart + 1`` vectors like ``b``).
        maxiter: maximum number of Arnoldi steps over all cycles (default: ``10 * size(b)``);
            each is one product with ``A``, and each cycle adds one for its true residual.
        M: right preconditioner approximating ``A^{-1}``, given like ``A`` (default: none).

    Returns:
        The approximate solution, with the structure of ``b``.

    Raises:
        ValueError: for negative tolerances, a bad ``restart`` or ``maxiter``, or ``x0`` /
            ``A(x)`` not shaped like ``b``.
        FloatingPointError: if the iteration produces a non-finite value.

    Warns:
        ConvergenceWarning: if ``maxiter`` products did not reach the tolerance.

    Example:
        >>> import torch
        >>> A = torch.tensor([[2.0, 1.0], [-1.0, 3.0]], dtype=torch.float64)  # not symmetric
        >>> b = torch.tensor([3.0, 2.0], dtype=torch.float64)
        >>> x = gmres(A, b, rtol=1e-12)  # exact after two products, up to rounding
        >>> torch.round(x, decimals=6)
        tensor([1., 1.], dtype=torch.float64)
    """
    check_tolerances(rtol, atol, maxiter)
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 1:
        raise ValueError(f"restart must be a positive int, got {restart!r}")
    space, matvec, precondition, b, maxiter = prepare(A, b, M, rtol, atol, maxiter)
    x = space.zeros() if x0 is None else space.vector(x0, "x0")
    target = threshold(rtol, atol, float(space.norm(b).detach()))

    iterations = 0
    while True:
        r = b if x0 is None and iterations == 0 else space.sub(b, matvec(x))
        beta = space.norm(r)
        residual = float(beta.detach())
        check_finite("gmres", residual)
        if residual <= target or residual == 0.0:
            return space.tree(x)
        if iterations >= maxiter:
            warn_not_converged("gmres", iterations, residual, target)
            return space.tree(x)
        basis = [space.scale(1.0 / beta, r)]
        hessenberg: list[list[torch.Tensor]] = []  # column j holds H[0..j+1, j]
        rotations: list[tuple[float, float]] = []
        g = [residual]  # beta e1 rotated: |g[-1]| is the residual norm of the best iterate
        for _ in range(min(restart, maxiter - iterations)):
            iterations += 1
            direction = basis[-1] if precondition is None else precondition(basis[-1])
            w = matvec(direction)
            column = []
            for v in basis:  # modified Gram-Schmidt
                h = space.dot(w, v)
                w = space.scaled_sub(w, v, h)
                column.append(h)
            h_next = space.norm(w)
            column.append(h_next)
            hessenberg.append(column)
            # Track ||beta e1 - H y|| on floats: rotate the new column by the previous rotations.
            values = [float(h.detach()) for h in column]
            for i, (c, s) in enumerate(rotations):
                values[i], values[i + 1] = c * values[i] + s * values[i + 1], (
                    -s * values[i] + c * values[i + 1]
                )
            c, s = _givens(values[-2], values[-1])
            rotations.append((c, s))
            g.append(-s * g[-1])
            g[-2] = c * g[-2]
            estimate = abs(g[-1])
            check_finite("gmres", estimate)
            if estimate <= target or float(h_next.detach()) <= 1e-14 * residual:
                break  # converged, or the Krylov space is invariant (the solution is in it)
            basis.append(space.scale(1.0 / h_next, w))
        y = _least_squares(hessenberg, beta)
        update = space.scale(y[0], basis[0])
        for j in range(1, len(hessenberg)):
            update = space.scaled_add(update, basis[j], y[j])
        if precondition is not None:
            update = precondition(update)
        x = space.add(x, update)
