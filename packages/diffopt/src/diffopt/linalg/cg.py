"""Conjugate gradient for ``A x = b`` with ``A`` symmetric positive definite, on pytrees."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from diffopt.linalg._krylov import prepare

__all__ = ["cg"]


def cg(
    A: Callable[[Any], Any] | Any,
    b: Any,
    x0: Any = None,
    *,
    rtol: float = 1e-5,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: Callable[[Any], Any] | Any = None,
) -> Any:
    r"""Solve ``A x = b`` by (preconditioned) conjugate gradient.

    ``A`` must be symmetric (Hermitian) positive definite. It is given matrix-free as a callable
    (e.g. a Hessian-vector product), or as a square matrix, or as a pytree of square matrices with
    the structure of ``b`` (a block-diagonal operator). ``b`` and the solution are tensors or
    pytrees of tensors of any shapes; the inner product is the sum of the leaves' real dot
    products. Iteration stops when :math:`\lVert r_k\rVert \le \max(\mathrm{rtol}\,\lVert b\rVert,
    \mathrm{atol})` (SciPy's non-legacy rule) or after ``maxiter`` steps.

    The iterations are ordinary differentiable tensor operations, so gradients flow through them
    when ``A``'s tensors or ``b`` require grad (implicit differentiation of a solve is what
    :func:`diffopt.diff.implicit.custom_root` is for).

    Args:
        A: callable ``A(x)`` returning a tree like ``x``, or a matrix / pytree of matrices.
        b: right-hand side, a tensor or pytree of tensors.
        x0: starting guess with the structure of ``b`` (default: zeros).
        rtol: relative tolerance on the residual norm.
        atol: absolute tolerance on the residual norm.
        maxiter: maximum number of iterations (default: ``10 * size(b)``).
        M: preconditioner approximating ``A^{-1}``, given like ``A`` (default: none).

    Returns:
        The approximate solution, with the structure of ``b``.

    Raises:
        ValueError: for negative tolerances, a bad ``maxiter``, or ``x0`` / ``A(x)`` not shaped
            like ``b``.
        FloatingPointError: if the iteration produces a non-finite value.

    Example:
        >>> import torch
        >>> A = {'u': torch.tensor([[2.0, 0.0], [0.0, 4.0]]), 'v': torch.tensor([[3.0]])}
        >>> b = {'u': torch.tensor([2.0, 4.0]), 'v': torch.tensor([6.0])}
        >>> x = cg(A, b)  # exact after three steps (three eigenvalues), up to rounding
        >>> torch.round(x['u'], decimals=4), torch.round(x['v'], decimals=4)
        (tensor([1., 1.]), tensor([2.]))
    """
    space, matvec, precondition, b, maxiter = prepare(A, b, M, rtol, atol, maxiter)
    if x0 is None:
        x = space.zeros()
        r = b
    else:
        x = space.vector(x0, "x0")
        r = space.sub(b, matvec(x))

    threshold2 = max(rtol**2 * float(space.dot(b, b).detach()), atol**2)
    z = r if precondition is None else precondition(r)
    gamma = space.dot(r, z)
    p = z
    warned = False
    for _ in range(maxiter):
        residual2 = gamma if precondition is None else space.dot(r, r)
        residual2 = float(residual2.detach())
        if not math.isfinite(residual2):
            raise FloatingPointError("cg: the residual became non-finite (inf or nan)")
        if residual2 <= threshold2:
            break
        Ap = matvec(p)
        curvature = space.dot(p, Ap)
        curvature_value = float(curvature.detach())
        if not math.isfinite(curvature_value):
            raise FloatingPointError("cg: A(p) returned a non-finite value (inf or nan)")
        if curvature_value == 0.0:
            break  # no progress possible along p; x is as good as CG can make it
        if curvature_value < 0.0 and not warned:
            warned = True
            warnings.warn(
                "cg: the operator is not positive definite (p^T A p < 0); conjugate gradient "
                "may not converge. Add a ridge, or use a normal-equation solver "
                "(diffopt.linear_solve.solve_normal_cg).",
                RuntimeWarning,
                stacklevel=2,
            )
        alpha = gamma / curvature
        x = space.scaled_add(x, p, alpha)
        r = space.scaled_sub(r, Ap, alpha)
        z = r if precondition is None else precondition(r)
        gamma_next = space.dot(r, z)
        beta = gamma_next / gamma
        p = space.scaled_add(z, p, beta)
        gamma = gamma_next
    return space.tree(x)
