"""What the Krylov solvers (CG, GMRES, BiCGSTAB) share: argument checks and set-up, the stopping
threshold and the warning a solver emits when it stops before reaching it."""

from __future__ import annotations

import math
import warnings
from typing import Any

from diffopt.linalg._operator import as_linear_operator, check_rhs, tree_size
from diffopt.linalg._vector import Space

__all__ = ["ConvergenceWarning"]


class ConvergenceWarning(RuntimeWarning):
    """An iterative solver stopped (at ``maxiter``) before reaching its tolerance.

    :func:`diffopt.linalg.gmres` and :func:`diffopt.linalg.bicgstab` emit it, and so does
    :func:`diffopt.fixed_point.solve` (through its subclass
    :class:`diffopt.fixed_point.FixedPointWarning`), so that an unconverged result never passes
    for a converged one. It is a :class:`RuntimeWarning`: turn it into an error with
    ``warnings.simplefilter('error', ConvergenceWarning)``.

    Example:
        >>> import warnings
        >>> import torch
        >>> from diffopt import linalg
        >>> A = torch.tensor([[2.0, 1.0], [-1.0, 3.0]], dtype=torch.float64)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter('always')
        ...     x = linalg.gmres(A, torch.tensor([1.0, 0.0], dtype=torch.float64), maxiter=1)
        >>> [w.category.__name__ for w in caught]
        ['ConvergenceWarning']
    """


def check_tolerances(rtol: float, atol: float, maxiter: int | None) -> None:
    if isinstance(rtol, bool) or not (
        isinstance(rtol, (int, float)) and rtol >= 0 and math.isfinite(rtol)
    ):
        raise ValueError(f"rtol must be a finite non-negative number, got {rtol!r}")
    if isinstance(atol, bool) or not (
        isinstance(atol, (int, float)) and atol >= 0 and math.isfinite(atol)
    ):
        raise ValueError(f"atol must be a finite non-negative number, got {atol!r}")
    if maxiter is not None and (
        isinstance(maxiter, bool) or not isinstance(maxiter, int) or maxiter < 0
    ):
        raise ValueError(f"maxiter must be a non-negative int or None, got {maxiter!r}")


def prepare(A: Any, b: Any, M: Any, rtol: float, atol: float, maxiter: int | None) -> tuple[Any, ...]:
    """Checks a solve's arguments and returns ``(space, matvec, precondition, b, maxiter)``: the
    vector space of ``b``, ``A`` and ``M`` (or ``None``) as operators on it, ``b`` as one of its
    vectors, and ``maxiter`` with its default ``10 * size(b)``."""
    check_tolerances(rtol, atol, maxiter)
    matvec = as_linear_operator(A, "A")
    precondition = None if M is None else as_linear_operator(M, "M")
    check_rhs(b)
    if maxiter is None:
        maxiter = 10 * tree_size(b)
    space = Space(b)
    matvec = space.operator(matvec, "A")
    if precondition is not None:
        precondition = space.operator(precondition, "M")
    return space, matvec, precondition, space.vector(b, "b"), maxiter


def threshold(rtol: float, atol: float, b_norm: float) -> float:
    """The residual norm at which a solve stops: ``max(rtol * ||b||, atol)`` (SciPy's rule)."""
    return max(rtol * b_norm, atol)


def check_finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise FloatingPointError(f"{name}: the residual became non-finite (inf or nan)")


def warn_not_converged(name: str, iterations: int, residual: float, target: float) -> None:
    warnings.warn(
        f"{name} did not converge: after {iterations} iteration(s) the residual norm is "
        f"{residual:.3g}, above the tolerance {target:.3g}. Raise maxiter, loosen rtol/atol, or "
        "precondition the system (M=...).",
        ConvergenceWarning,
        stacklevel=3,
    )
