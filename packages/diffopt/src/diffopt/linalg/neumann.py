r"""Neumann-series approximations of ``A^{-1} b`` and ``A^{-1}``.

For a step size :math:`\alpha` with spectral radius :math:`\rho(I - \alpha A) < 1`,

.. math::

    A^{-1} = \alpha \sum_{k=0}^{\infty} (I - \alpha A)^k ,

and truncating after ``maxiter`` terms gives the approximations used by Lorraine et al. (2020),
"Optimizing Millions of Hyperparameters by Implicit Differentiation". For a symmetric positive
definite ``A`` the series converges exactly when :math:`0 < \alpha < 2 / \lambda_{\max}(A)`.
When the terms stop shrinking the series is diverging: these functions then warn with
:class:`NeumannDivergenceWarning`, or raise :class:`FloatingPointError` once values overflow,
instead of returning silently wrong numbers.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

import optree_core
from diffopt.linalg._operator import as_linear_operator, check_rhs
from diffopt.linalg._vector import Space

__all__ = ["NeumannDivergenceWarning", "ns", "ns_inv"]

DEFAULT_MAXITER = 100


class NeumannDivergenceWarning(RuntimeWarning):
    """The Neumann series' terms are not shrinking, so its partial sums do not approach A^-1.

    :func:`ns` and :func:`ns_inv` emit it (a :class:`RuntimeWarning`) when the spectral radius of
    ``I - alpha * A`` is not below 1; pick a smaller ``alpha`` or use CG instead.

    Example:
        >>> import warnings
        >>> import torch
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter('always')
        ...     approx = ns_inv(torch.tensor([[3.0]]), maxiter=5)  # |1 - 3| > 1: diverges
        >>> [w.category.__name__ for w in caught], approx
        (['NeumannDivergenceWarning'], tensor([[-21.]]))
    """


def _check_arguments(maxiter: int | None, alpha: float | None) -> tuple[int, float]:
    if maxiter is None:
        maxiter = DEFAULT_MAXITER
    if isinstance(maxiter, bool) or not isinstance(maxiter, int) or maxiter < 0:
        raise ValueError(f"maxiter must be a non-negative int or None, got {maxiter!r}")
    if alpha is None:
        alpha = 1.0
    if isinstance(alpha, torch.Tensor):
        alpha = float(alpha)
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite positive number or None, got {alpha!r}")
    return maxiter, float(alpha)


def _diverging(first_norm: float, last_norm: float, what: str, alpha: float) -> None:
    if not math.isfinite(last_norm):
        raise FloatingPointError(
            f"{what}: the Neumann series diverged (its terms overflowed): the spectral radius of "
            f"I - alpha*A is >= 1 for alpha={alpha}. Pass a smaller alpha (below "
            f"2 / largest eigenvalue of A) or use conjugate gradient."
        )
    if last_norm > first_norm:
        warnings.warn(
            f"{what}: the Neumann series is not converging (its last term is larger than its "
            f"first: {last_norm:.3g} > {first_norm:.3g}), so the result is not an approximation "
            f"of the inverse. The spectral radius of I - alpha*A is >= 1 for alpha={alpha}: pass "
            f"a smaller alpha (below 2 / largest eigenvalue of A) or use conjugate gradient.",
            NeumannDivergenceWarning,
            stacklevel=3,
        )


def ns(
    A: Callable[[Any], Any] | Any,
    b: Any,
    maxiter: int | None = None,
    *,
    alpha: float | None = None,
) -> Any:
    r"""Approximate the solution of ``A x = b`` with a truncated Neumann series.

    Computes :math:`x = \alpha \sum_{k=0}^{K} (I - \alpha A)^k b` with :math:`K` = ``maxiter``
    products with ``A``, which tends to :math:`A^{-1} b` when :math:`\rho(I - \alpha A) < 1`.
    (TorchOpt's ``ns`` leaves out the leading :math:`\alpha`, so with ``alpha != 1`` it returns
    :math:`A^{-1} b / \alpha`; this one returns the solution.)

    Args:
        A: callable ``A(x)`` returning a tree like ``x`` (e.g. a Hessian-vector product), or a
            square matrix, or a pytree of square matrices with the structure of ``b``.
        b: right-hand side, a tensor or pytree of tensors.
        maxiter: number of terms after the first, i.e. products with ``A`` (default: 100).
        alpha: step size :math:`\alpha` (default: 1); convergence needs
            :math:`0 < \alpha < 2 / \lambda_{\max}(A)` for symmetric positive definite ``A``.

    Returns:
        The approximate solution, with the structure of ``b``.

    Raises:
        ValueError: for a non-positive ``alpha`` or a negative ``maxiter``.
        FloatingPointError: if the series overflows (it diverges).

    Warns:
        NeumannDivergenceWarning: if the last term is larger than the first (the series is not
            converging).

    Example:
        >>> import torch
        >>> A = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
        >>> b = torch.tensor([1.0, 1.0], dtype=torch.float64)
        >>> x = ns(lambda v: A @ v, b, maxiter=200, alpha=0.5)
        >>> torch.allclose(A @ x, b)
        True
    """
    maxiter, alpha = _check_arguments(maxiter, alpha)
    matvec = as_linear_operator(A, "A")
    check_rhs(b)
    space = Space(b)
    matvec = space.operator(matvec, "A")
    term = total = space.vector(b, "b")
    first_norm = float(space.norm(term).detach())
    last_norm = first_norm
    for _ in range(maxiter):
        term = space.scaled_sub(term, matvec(term), alpha)
        total = space.add(total, term)
        last_norm = float(space.norm(term).detach())
        if not math.isfinite(last_norm) or last_norm == 0.0:
            break
    _diverging(first_norm, last_norm, "ns", alpha)
    return space.tree(space.scale(alpha, total))


def ns_inv(
    A: Any,
    maxiter: int | None = None,
    *,
    alpha: float | None = None,
) -> Any:
    r"""Approximate the inverse of a matrix (or of each matrix in a pytree) by a Neumann series.

    Computes :math:`\alpha \sum_{k=0}^{K} (I - \alpha A)^k` with :math:`K` = ``maxiter``. Given a
    matrix-free operator (a callable ``A(x)``), it returns the approximate inverse as an operator
    too: the function ``b -> ns(A, b, maxiter, alpha=alpha)``.

    Args:
        A: a square matrix, a pytree of square matrices (each inverted on its own), or a
            callable ``A(x)``.
        maxiter: number of terms after the first (default: 100).
        alpha: step size :math:`\alpha` (default: 1); convergence needs
            :math:`\rho(I - \alpha A) < 1`.

    Returns:
        The approximate inverse, with the structure of ``A`` (a callable for a callable ``A``).

    Raises:
        TypeError / ValueError: if ``A`` holds something other than square matrices, or for a bad
            ``alpha`` / ``maxiter``.
        FloatingPointError: if the series overflows (it diverges).

    Warns:
        NeumannDivergenceWarning: if the series is not converging.

    Example:
        >>> import torch
        >>> A = torch.tensor([[1.5, 0.25], [0.25, 0.75]], dtype=torch.float64)
        >>> torch.allclose(ns_inv(A, maxiter=200) @ A, torch.eye(2, dtype=torch.float64))
        True
        >>> inverse = ns_inv(lambda v: A @ v, maxiter=200)  # matrix-free in, matrix-free out
        >>> b = torch.ones(2, dtype=torch.float64)
        >>> torch.allclose(A @ inverse(b), b)
        True
    """
    maxiter, alpha = _check_arguments(maxiter, alpha)
    if callable(A) and not isinstance(A, torch.Tensor):

        def inverse(b: Any) -> Any:
            return ns(A, b, maxiter, alpha=alpha)

        return inverse
    leaves, treespec = optree_core.tree_flatten(A)
    if not leaves:
        raise ValueError("ns_inv: A must hold at least one matrix, got an empty pytree")
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"ns_inv: A must hold tensors, got {type(leaf).__name__}")
        if leaf.ndim != 2 or leaf.shape[0] != leaf.shape[1]:
            raise ValueError(f"ns_inv: A must hold square matrices, got shape {tuple(leaf.shape)}")
        if not (leaf.is_floating_point() or leaf.is_complex()):
            raise TypeError(f"ns_inv: A must hold floating-point matrices, got {leaf.dtype}")
    inverses = []
    for matrix in leaves:
        eye = torch.eye(matrix.shape[0], dtype=matrix.dtype, device=matrix.device)
        term = eye
        total = eye
        first_norm = float(torch.linalg.matrix_norm(eye))
        last_norm = first_norm
        for _ in range(maxiter):
            term = term - alpha * (matrix @ term)
            total = total + term
            last_norm = float(torch.linalg.matrix_norm(term.detach()))
            if not math.isfinite(last_norm) or last_norm == 0.0:
                break
        _diverging(first_norm, last_norm, "ns_inv", alpha)
        inverses.append(alpha * total)
    return optree_core.tree_unflatten(treespec, inverses)
