"""Implicit differentiation: gradients of a solution through its optimality condition.

``custom_root(optimality_fn, argnums)`` decorates any inner solver so that its solution is
differentiable with respect to the chosen arguments by the implicit function theorem, whatever the
solver did to reach it; ``custom_fixed_point(fixed_point_fn, argnums)`` does the same for a solver
of ``z = fixed_point_fn(z, *args)`` (a deep-equilibrium layer, for instance). :class:`ImplicitMetaGradientModule` is the object-oriented form (also at
:class:`diffopt.nn.ImplicitMetaGradientModule`).

Example:
    >>> import torch
    >>> from diffopt.diff.implicit import custom_root
    >>> def optimality(x, a):  # x solves x**3 = a
    ...     return x**3 - a
    >>> @custom_root(optimality, argnums=1)
    ... def cube_root(x0, a):
    ...     x = x0.clone()
    ...     for _ in range(50):  # Newton's method, never differentiated
    ...         x -= (x**3 - a) / (3 * x**2)
    ...     return x
    >>> a = torch.tensor(8.0, dtype=torch.float64, requires_grad=True)
    >>> x = cube_root(torch.tensor(1.0, dtype=torch.float64), a)
    >>> x.backward()
    >>> # d(a^(1/3))/da = 1 / (3 a^(2/3)) = 1/12, up to the solver's rounding
    >>> round(float(x.detach()), 6), round(float(a.grad), 6)
    (2.0, 0.083333)
"""

from diffopt.diff.implicit.decorator import custom_root
from diffopt.diff.implicit.fixed_point import custom_fixed_point

__all__ = ["ImplicitMetaGradientModule", "custom_fixed_point", "custom_root"]


def __getattr__(name: str):
    # The module class lives in diffopt.nn (which imports this package), and so does what the
    # ``nn`` subpackage re-exports: resolve both lazily.
    if name == "ImplicitMetaGradientModule":
        from diffopt.nn.implicit import ImplicitMetaGradientModule

        return ImplicitMetaGradientModule
    if name == "nn":
        import importlib

        return importlib.import_module(f"{__name__}.nn")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
