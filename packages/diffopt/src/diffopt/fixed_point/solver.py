r"""``solve``: find ``z`` with ``z = fn(z, *args)`` by plain iteration, Anderson or Broyden."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

import optree_core
from diffopt.fixed_point._methods import Anderson, Broyden, Iteration
from diffopt.linalg import ConvergenceWarning

__all__ = ["METHODS", "FixedPointError", "FixedPointResult", "FixedPointWarning", "solve"]

METHODS = ("anderson", "broyden", "iteration")
_ON_FAILURE = ("warn", "raise", "ignore")
_DEFAULT_MEMORY = {"anderson": 5}  # broyden's default keeps every update (the exact method)


class FixedPointResult(NamedTuple):
    r"""What :func:`solve` found: the iterate, and whether it is a fixed point to tolerance.

    Attributes:
        value: the last iterate ``z``, a pytree like ``z0``.
        converged: whether ``residual`` met the tolerance.
        iterations: the number of steps taken (``fn`` was evaluated ``iterations + 1`` times).
        residual: :math:`\lVert fn(z) - z\rVert_2` at ``value``, over all leaves (a float).

    Example:
        >>> import torch
        >>> result = solve(lambda z: z / 2 + 1, torch.tensor([0.0]), method='iteration',
        ...                tol=0.3)
        >>> result.value, result.converged, result.iterations, result.residual
        (tensor([1.5000]), True, 2, 0.25)
    """

    value: Any
    converged: bool
    iterations: int
    residual: float


class FixedPointWarning(ConvergenceWarning):
    """:func:`solve` stopped (at ``max_iter``, or on a non-finite value) short of its tolerance.

    A subclass of :class:`diffopt.linalg.ConvergenceWarning` (a :class:`RuntimeWarning`), emitted
    with the default ``on_failure="warn"``.

    Example:
        >>> import warnings
        >>> import torch
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter('always')
        ...     result = solve(lambda z: z / 2 + 1, torch.tensor([0.0]), method='iteration',
        ...                    max_iter=3)
        >>> [w.category.__name__ for w in caught], result.converged
        (['FixedPointWarning'], False)
    """


class FixedPointError(RuntimeError):
    """:func:`solve` with ``on_failure="raise"`` did not converge; ``.result`` holds what it got.

    Args:
        message: the explanation.
        result: the unconverged :class:`FixedPointResult`.

    Example:
        >>> import torch
        >>> try:
        ...     solve(lambda z: 2 * z + 1, torch.tensor([0.0]), method='iteration', max_iter=4,
        ...           on_failure='raise')
        ... except FixedPointError as error:
        ...     print(error.result.value, error.result.converged)
        tensor([15.]) False
    """

    def __init__(self, message: str, result: FixedPointResult) -> None:
        super().__init__(message)
        self.result = result


def _positive_number(name: str, value: Any, *, allow_zero: bool) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"fixed_point.solve: {name} must be a finite {kind} number, got {value!r}")
    return float(value)


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"fixed_point.solve: {name} must be an int >= {minimum}, got {value!r}")
    return value


def _make_method(method: str, memory: int | None, beta: float | None,
                 regularization: float | None, max_iter: int) -> Any:
    if method not in METHODS:
        raise ValueError(f"fixed_point.solve: method must be one of {METHODS}, got {method!r}")
    unused = [name for name, value, users in (
        ("memory", memory, ("anderson", "broyden")),
        ("beta", beta, ("anderson",)),
        ("regularization", regularization, ("anderson",)),
    ) if value is not None and method not in users]
    if unused:
        raise TypeError(f"fixed_point.solve: method={method!r} takes no {', '.join(unused)}")
    if method == "iteration":
        return Iteration()
    if memory is None:
        memory = _DEFAULT_MEMORY.get(method, max(max_iter, 1))
    memory = _check_int("memory", memory, 1)
    if method == "broyden":
        return Broyden(memory)
    beta = 1.0 if beta is None else _positive_number("beta", beta, allow_zero=False)
    regularization = (1e-10 if regularization is None else
                      _positive_number("regularization", regularization, allow_zero=True))
    return Anderson(memory, beta, regularization)


class _Flat:
    """``z0``'s pytree as one flat vector, and ``fn`` as a map of such vectors (checked)."""

    def __init__(self, fn: Callable[..., Any], z0: Any, args: tuple[Any, ...]) -> None:
        leaves, self.spec = optree_core.tree_flatten(z0)
        if not leaves:
            raise ValueError("fixed_point.solve: z0 must hold at least one tensor, got an empty "
                             "pytree")
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(f"fixed_point.solve: every leaf of z0 must be a tensor, got "
                                f"{type(leaf).__name__}")
            if not leaf.is_floating_point():
                raise TypeError(f"fixed_point.solve: z0 must hold real floating-point tensors, "
                                f"got dtype {leaf.dtype}")
        self.fn, self.args = fn, args
        self.shapes = [leaf.shape for leaf in leaves]
        self.dtypes = [leaf.dtype for leaf in leaves]
        self.sizes = [leaf.numel() for leaf in leaves]
        self.z0 = self.flatten(leaves)

    @staticmethod
    def flatten(leaves: list[torch.Tensor]) -> torch.Tensor:
        if len(leaves) == 1:
            return leaves[0].detach().reshape(-1)
        return torch.cat([leaf.detach().reshape(-1) for leaf in leaves])

    def tree(self, z: torch.Tensor) -> Any:
        chunks = z.split(self.sizes) if len(self.sizes) > 1 else (z,)
        leaves = [chunk.reshape(shape).to(dtype)
                  for chunk, shape, dtype in zip(chunks, self.shapes, self.dtypes)]
        return optree_core.tree_unflatten(self.spec, leaves)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        out = self.fn(self.tree(z), *self.args)
        leaves, spec = optree_core.tree_flatten(out)
        if spec != self.spec:
            raise ValueError(f"fixed_point.solve: fn must return a pytree with the structure of "
                             f"z0: got {spec}, expected {self.spec}")
        for leaf, shape in zip(leaves, self.shapes):
            if not isinstance(leaf, torch.Tensor) or leaf.shape != shape:
                got = tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else type(leaf).__name__
                raise ValueError(f"fixed_point.solve: fn must return tensors shaped like z0's "
                                 f"leaves: got {got}, expected {tuple(shape)}")
        return self.flatten(leaves).to(self.z0.dtype)


def solve(
    fn: Callable[..., Any],
    z0: Any,
    *args: Any,
    method: str = "anderson",
    tol: float = 1e-5,
    rtol: float = 0.0,
    max_iter: int = 100,
    on_failure: str = "warn",
    memory: int | None = None,
    beta: float | None = None,
    regularization: float | None = None,
) -> FixedPointResult:
    r"""Find a fixed point ``z = fn(z, *args)``, starting from ``z0``.

    Iterates until :math:`\lVert fn(z) - z\rVert_2 \le \max(\mathrm{tol},
    \mathrm{rtol}\,\lVert fn(z)\rVert_2)` (norms over all leaves) or ``max_iter`` steps:

    * ``"iteration"``: plain iteration ``z <- fn(z)``; converges linearly when ``fn`` is a
      contraction.
    * ``"anderson"`` (default): Anderson acceleration (Walker & Ni, 2011), mixing the last
      ``memory`` iterates to minimize the linearized residual; ``beta`` is the mixing (damping)
      factor and ``regularization`` a scale-free ridge on its small least-squares problem. The
      usual choice for deep-equilibrium layers (Bai et al., 2019).
    * ``"broyden"``: good Broyden's quasi-Newton method on ``fn(z) - z`` in low-rank form,
      keeping ``memory`` updates (default: all, the exact method); superlinear near a regular
      fixed point, and it can find fixed points that are not attractive.

    Runs under :func:`torch.no_grad`: its result is not differentiable. To differentiate the fixed
    point with respect to ``args``, call it inside a solver decorated with
    :func:`diffopt.diff.implicit.custom_fixed_point`, whose backward needs no forward graph.

    A solve that does not converge (``max_iter`` reached, or a non-finite value) never passes
    silently for one that did: ``on_failure="warn"`` (default) emits a :class:`FixedPointWarning`,
    ``"raise"`` raises :class:`FixedPointError` (its ``.result`` holds the last iterate) and
    ``"ignore"`` only reports it in ``converged``.

    Args:
        fn: the map, called ``fn(z, *args)``; returns a pytree like ``z``.
        z0: the starting point, a tensor or pytree of real floating-point tensors (leaves of
            several dtypes are iterated in their promoted dtype).
        *args: further arguments of ``fn`` (e.g. its parameters), passed unchanged.
        method: ``"anderson"``, ``"broyden"`` or ``"iteration"``.
        tol: absolute tolerance on the residual norm.
        rtol: relative tolerance, against :math:`\lVert fn(z)\rVert_2`.
        max_iter: the maximum number of steps.
        on_failure: ``"warn"``, ``"raise"`` or ``"ignore"``: what a failure to converge does.
        memory: past steps kept (Anderson: default 5; Broyden: default all).
        beta: Anderson's mixing factor (default 1: the undamped update).
        regularization: Anderson's ridge, relative to the residual differences' mean squared norm
            (default 1e-10).

    Returns:
        A :class:`FixedPointResult` ``(value, converged, iterations, residual)``.

    Raises:
        TypeError: if ``fn`` is not callable, ``z0`` holds something other than real
            floating-point tensors, or an option does not belong to ``method``.
        ValueError: for a bad option value, or if ``fn`` returns a tree unlike ``z0``.
        FixedPointError: with ``on_failure="raise"``, when the solve does not converge.

    Warns:
        FixedPointWarning: with ``on_failure="warn"``, when the solve does not converge.

    Example:
        >>> import torch
        >>> A = torch.tensor([[0.5, 0.25], [0.0, 0.5]], dtype=torch.float64)
        >>> b = torch.tensor([1.0, 1.0], dtype=torch.float64)
        >>> result = solve(lambda z, b: A @ z + b, torch.zeros(2, dtype=torch.float64), b,
        ...                tol=1e-12)
        >>> result.converged, torch.round(result.value, decimals=6)  # z = (I - A)^{-1} b
        (True, tensor([3., 2.], dtype=torch.float64))
    """
    if not callable(fn):
        raise TypeError(f"fixed_point.solve: fn must be callable, got {type(fn).__name__}")
    tol = _positive_number("tol", tol, allow_zero=True)
    rtol = _positive_number("rtol", rtol, allow_zero=True)
    max_iter = _check_int("max_iter", max_iter, 0)
    if on_failure not in _ON_FAILURE:
        raise ValueError(f"fixed_point.solve: on_failure must be one of {_ON_FAILURE}, got "
                         f"{on_failure!r}")
    stepper = _make_method(method, memory, beta, regularization, max_iter)
    problem = _Flat(fn, z0, args)

    with torch.no_grad():
        z = problem.z0
        fz = problem(z)
        iterations = 0
        while True:
            r = fz - z
            residual = float(torch.linalg.vector_norm(r))
            finite = math.isfinite(residual)
            converged = finite and residual <= max(tol, rtol * float(torch.linalg.vector_norm(fz)))
            if converged or not finite or iterations >= max_iter:
                break
            z = stepper.propose(z, r)
            fz = problem(z)
            iterations += 1
    result = FixedPointResult(problem.tree(z), converged, iterations, residual)
    if not converged and on_failure != "ignore":
        reason = ("a non-finite value (the iteration diverged)" if not finite else
                  f"a residual norm of {residual:.3g} after max_iter={max_iter} steps")
        message = (f"fixed_point.solve(method={method!r}) did not converge: it stopped at "
                   f"{reason}, above the tolerance (tol={tol:g}, rtol={rtol:g}). Raise max_iter, "
                   "try another method, or damp the iteration (Anderson's beta < 1).")
        if on_failure == "raise":
            raise FixedPointError(message, result)
        warnings.warn(message, FixedPointWarning, stacklevel=2)
    return result
