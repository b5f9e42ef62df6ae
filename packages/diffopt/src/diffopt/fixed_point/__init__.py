"""Fixed points ``z = f(z, *args)``: plain iteration, Anderson acceleration and Broyden's method.

:func:`solve` is the forward solver; it runs without building an autograd graph. Differentiate
its result with respect to ``args`` by implicit differentiation with
:func:`diffopt.diff.implicit.custom_fixed_point`, as deep-equilibrium layers do.

Example:
    >>> import torch
    >>> from diffopt import fixed_point
    >>> result = fixed_point.solve(torch.cos, torch.tensor(1.0, dtype=torch.float64), tol=1e-10)
    >>> result.converged, round(float(result.value), 6)  # the Dottie number, cos(z) = z
    (True, 0.739085)
"""

from diffopt.fixed_point.solver import (
    METHODS,
    FixedPointError,
    FixedPointResult,
    FixedPointWarning,
    solve,
)

__all__ = ["METHODS", "FixedPointError", "FixedPointResult", "FixedPointWarning", "solve"]
