r"""``custom_fixed_point``: implicit gradients of a fixed point ``z* = f(z*, theta)``.

A fixed point is a root of :math:`F(z, \theta) = f(z, \theta) - z`, so this is
:func:`~diffopt.diff.implicit.custom_root` with that optimality condition: the backward pass
solves :math:`(\partial_z f - I)^\top u = v` and returns :math:`-(\partial_\theta f)^\top u`, both
products being vector-Jacobian products of ``f`` at the solution (Bai et al., 2019, "Deep
Equilibrium Models"; Blondel et al., 2022).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import optree_core
from diffopt import tree_math
from diffopt.diff.implicit.decorator import _keyword_filter, custom_root

__all__ = ["custom_fixed_point"]


def custom_fixed_point(
    fixed_point_fn: Callable[..., Any],
    argnums: int | tuple[int, ...] = 1,
    has_aux: bool = False,
    solve: Callable[[Callable[[Any], Any], Any], Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    r"""Make a fixed-point solver's output differentiable by implicit differentiation.

    .. code-block:: python

        def fixed_point_fn(z, arg1, arg2, ...):  # returns a pytree like z; z* = f(z*, ...)
            ...

        @custom_fixed_point(fixed_point_fn, argnums=1)
        def solver_fn(z0, arg1, arg2, ...):
            ...  # any computation: diffopt.fixed_point.solve, a loop under no_grad...
            return z_star

        z_star = solver_fn(z0, arg1, arg2, ...)  # differentiable w.r.t. arg1

    It has :func:`custom_root`'s calling convention and machinery, with the optimality condition
    ``fixed_point_fn(z, *args) - z``: ``fixed_point_fn`` is called with the solver's positional
    arguments after the first (and the keyword arguments it accepts), the solver runs on
    detached copies of the differentiated arguments, and ``z`` and the arguments may be any
    pytrees of tensors (dicts, tuples, a module's parameters). The gradient is exact when the
    solver reached the fixed point and the linear solve converged; the backward pass never needs
    the solver's graph, so its memory does not grow with the solver's iterations.

    The backward linear system :math:`(I - \partial_z f)^\top u = v` is not symmetric:
    :func:`diffopt.linear_solve.solve_gmres` suits it (one product per iteration),
    :func:`~diffopt.linear_solve.solve_bicgstab` keeps constant memory, the default
    :func:`~diffopt.linear_solve.solve_normal_cg` (as in :func:`custom_root`) always applies but
    squares the condition number, and :func:`~diffopt.linear_solve.solve_lu` is exact for small
    ``z``.

    Args:
        fixed_point_fn: the map ``f(z, *args)`` whose fixed point the solver returns; it returns
            a pytree with ``z``'s structure and leaf shapes.
        argnums: index or tuple of indices (>= 1) of the solver's positional arguments to
            differentiate with respect to (default 1).
        has_aux: whether the solver returns ``(z_star, aux)``; ``aux`` is passed through.
        solve: a linear solver ``solve(matvec, b)`` for the transposed system (default
            :func:`diffopt.linear_solve.solve_normal_cg`).

    Returns:
        A decorator turning ``solver_fn`` into a function with the same signature whose output is
        differentiable with respect to the arguments selected by ``argnums``.

    Raises:
        TypeError / ValueError: as :func:`custom_root`: at decoration for a non-callable
            ``fixed_point_fn`` or bad ``argnums``; in the backward pass when ``fixed_point_fn``
            returns a tree unlike ``z``.

    Example:
        The fixed point of ``z = a * z + 1`` is ``z* = 1 / (1 - a)``, so ``dz*/da = z*^2``:

        >>> import torch
        >>> from diffopt import fixed_point, linear_solve
        >>> def f(z, a):
        ...     return a * z + 1
        >>> @custom_fixed_point(f, argnums=1, solve=linear_solve.solve_gmres(rtol=1e-12))
        ... def solver(z0, a):
        ...     return fixed_point.solve(f, z0, a, tol=1e-12).value
        >>> a = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        >>> z = solver(torch.tensor(0.0, dtype=torch.float64), a)
        >>> (dz,) = torch.autograd.grad(z, a)
        >>> round(float(z.detach()), 6), round(float(dz), 6)
        (2.0, 4.0)
    """
    if not callable(fixed_point_fn):
        raise TypeError(f"fixed_point_fn must be callable, got {type(fixed_point_fn).__name__}")
    accepted = _keyword_filter(fixed_point_fn)

    def optimality_fn(z: Any, *args: Any, **kwargs: Any) -> Any:
        image = fixed_point_fn(z, *args, **accepted(kwargs))
        image_leaves, image_spec = optree_core.tree_flatten(image)
        z_leaves, z_spec = optree_core.tree_flatten(z)
        if image_spec != z_spec:
            raise ValueError(
                "custom_fixed_point: fixed_point_fn must return a pytree with the structure of "
                f"its first argument: got {image_spec}, expected {z_spec}"
            )
        for leaf, reference in zip(image_leaves, z_leaves):
            if not isinstance(leaf, torch.Tensor) or leaf.shape != reference.shape:
                got = tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else type(leaf).__name__
                raise ValueError(
                    "custom_fixed_point: fixed_point_fn must return tensors shaped like its first "
                    f"argument's leaves: got {got}, expected {tuple(reference.shape)}"
                )
        return tree_math.tree_sub(image, z)

    return custom_root(optimality_fn, argnums=argnums, has_aux=has_aux, solve=solve)
