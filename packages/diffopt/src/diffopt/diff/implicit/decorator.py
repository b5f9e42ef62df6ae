r"""``custom_root``: attach implicit-function-theorem gradients to any root or argmin solver.

If :math:`x^\star(\theta)` satisfies :math:`F(x^\star, \theta) = 0`, then
:math:`\partial x^\star / \partial \theta = -A^{-1} B` with :math:`A = \partial_x F` and
:math:`B = \partial_\theta F` at the solution. For a cotangent :math:`v` (the gradient of the
outer loss with respect to :math:`x^\star`) the backward pass solves :math:`A^\top u = v` with a
matrix-free linear solver and returns :math:`-B^\top u`: two vector-Jacobian products of
:math:`F` per solver iteration, no matter how many steps the inner solver took (Krantz & Parks,
*The Implicit Function Theorem*; Blondel et al. 2022, "Efficient and Modular Implicit
Differentiation").
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

import optree_core
from diffopt import linear_solve
from diffopt.linear_solve._utils import vjp

__all__ = ["custom_root"]


def _normalize_argnums(argnums: int | Sequence[int]) -> tuple[int, ...]:
    single = isinstance(argnums, int) and not isinstance(argnums, bool)
    values = (argnums,) if single else argnums
    if not isinstance(values, (tuple, list)) or not values:
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"argnums must hold ints, got {value!r}")
        if value < 0:
            raise ValueError(f"argnums must be non-negative, got {value}")
        if value == 0:
            raise ValueError(
                "argnums cannot include 0: argument 0 of the solver is the initial guess of the "
                "solution, which the solution does not depend on at a root; differentiate with "
                "respect to arguments 1, 2, ..."
            )
    if len(set(values)) != len(values):
        raise ValueError(f"argnums has repeated entries: {tuple(values)}")
    return tuple(values)


def _is_differentiable(leaf: Any) -> bool:
    return isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex())


def _keyword_filter(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Keep only the keyword arguments ``fn`` accepts (all of them if it takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return lambda kwargs: kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return lambda kwargs: kwargs
    names = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return lambda kwargs: {k: v for k, v in kwargs.items() if k in names}


class _RootProblem:
    """Everything the backward pass needs besides the tensors autograd saves."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def arguments(self, diff_values: Sequence[torch.Tensor]) -> list[Any]:
        """The solver's positional arguments with the differentiated leaves replaced."""
        leaves = list(self.arg_leaves)
        for position, value in zip(self.diff_positions, diff_values):
            leaves[position] = value
        trees = optree_core.tree_unflatten(self.arg_spec, leaves)
        args = list(self.args)
        for argnum, tree in zip(self.argnums, trees):
            args[argnum] = tree
        return args


def _optimality_residual(problem: _RootProblem, solution: Any, args: list[Any]) -> list[Any]:
    residual = problem.optimality_fn(solution, *args[1:], **problem.optimality_kwargs)
    leaves, spec = optree_core.tree_flatten(residual)
    if spec != problem.solution_spec:
        raise ValueError(
            "custom_root: optimality_fn must return a pytree with the structure of the solution: "
            f"got {spec}, expected {problem.solution_spec}"
        )
    for leaf, reference in zip(leaves, problem.solution_shapes):
        if not isinstance(leaf, torch.Tensor) or leaf.shape != reference:
            got = tuple(leaf.shape) if isinstance(leaf, torch.Tensor) else type(leaf).__name__
            raise ValueError(
                "custom_root: optimality_fn must return tensors shaped like the solution's "
                f"leaves: got {got}, expected {tuple(reference)}"
            )
    return leaves


class _ImplicitRoot(torch.autograd.Function):
    """Identity on the solution in the forward pass; the implicit VJP in the backward pass."""

    @staticmethod
    def forward(ctx, problem: _RootProblem, *tensors: torch.Tensor):  # type: ignore[override]
        num_diff = len(problem.diff_positions)
        ctx.problem = problem
        ctx.save_for_backward(*tensors[:num_diff], *problem.solution_leaves)
        non_differentiable = [s for s in problem.solution_leaves if not _is_differentiable(s)]
        if non_differentiable:
            ctx.mark_non_differentiable(*non_differentiable)
        return tuple(problem.solution_leaves)

    @staticmethod
    def backward(ctx, *cotangents: torch.Tensor):  # type: ignore[override]
        problem: _RootProblem = ctx.problem
        saved = ctx.saved_tensors
        num_diff = len(problem.diff_positions)
        thetas = [t.detach().requires_grad_(True) for t in saved[:num_diff]]
        solution = [s.detach() for s in saved[num_diff:]]
        solution = [s.requires_grad_(True) if _is_differentiable(s) else s for s in solution]
        variables = [s for s in solution if s.requires_grad]
        with torch.enable_grad():
            residual = _optimality_residual(
                problem,
                optree_core.tree_unflatten(problem.solution_spec, solution),
                problem.arguments(thetas),
            )
        residual = [r for r, s in zip(residual, solution) if s.requires_grad]
        if not any(r.requires_grad for r in residual):
            raise RuntimeError(
                "custom_root: optimality_fn's output does not depend differentiably on the "
                "solution or on the differentiated arguments, so no implicit gradient exists"
            )
        # The linear solver sees trees shaped like the solution (a list when some of its leaves,
        # e.g. integer counters, are not differentiable), so a solver's `init` can match it.
        if len(variables) == len(solution):
            variable_spec = problem.solution_spec
        else:
            variable_spec = optree_core.tree_structure(variables)

        def transposed_jacobian(u: Any) -> Any:  # u -> (dF/dx)^T u
            grads = vjp(residual, variables, optree_core.tree_leaves(u), retain_graph=True)
            return optree_core.tree_unflatten(variable_spec, grads)

        v = [c for c, s in zip(cotangents, solution) if s.requires_grad]
        v = [torch.zeros_like(s) if c is None else c for c, s in zip(v, variables)]
        u = problem.solve(transposed_jacobian, optree_core.tree_unflatten(variable_spec, v))
        u_leaves, u_spec = optree_core.tree_flatten(u)
        if u_spec != variable_spec:
            raise ValueError(
                f"custom_root: the linear solver returned a tree {u_spec}, expected {variable_spec}"
            )
        theta_grads = vjp(residual, thetas, u_leaves, retain_graph=False)
        return (None, *[g.neg() for g in theta_grads])


def custom_root(
    optimality_fn: Callable[..., Any],
    argnums: int | tuple[int, ...],
    has_aux: bool = False,
    solve: Callable[[Callable[[Any], Any], Any], Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    r"""Make a solver's output differentiable by implicit differentiation (a decorator).

    .. code-block:: python

        def optimality_fn(solution, arg1, arg2, ...):  # == 0 (a pytree like solution) at the root
            ...

        @custom_root(optimality_fn, argnums=1)
        def solver_fn(init, arg1, arg2, ...):
            ...  # any computation: unrolled or not, in-place, non-differentiable, torch.optim...
            return solution

        solution = solver_fn(init, arg1, arg2, ...)  # differentiable w.r.t. arg1

    ``optimality_fn`` is called as ``optimality_fn(solution, *args[1:], **kwargs)`` with the
    solver's arguments (keyword arguments it does not accept are left out), so it should share the
    solver's signature. For an argmin, it is the gradient of the inner objective with respect to
    the solution. The solver runs on detached copies of the differentiated arguments, so it may do
    anything; only the optimality condition at its output is differentiated. ``argnums`` counts the
    solver's positional arguments from 0 (the initial guess, which cannot be differentiated), as in
    TorchOpt. Unlike TorchOpt, differentiated arguments and the solution may be any pytree of
    tensors (dicts, tuples, lists, namedtuples, nested).

    The gradient is exact when the solver reached the root and the linear solve converged;
    the backward pass costs one vector-Jacobian product of ``optimality_fn`` per linear-solver
    iteration (two for normal CG), and its memory does not grow with the solver's steps.

    Note:
        The differentiated arguments reach the solver as detached aliases (no copy): changing
        them in place changes the caller's tensors. Gradients are first order: the implicit
        gradient is not itself differentiated again under ``create_graph=True``.

    Args:
        optimality_fn: the optimality condition ``F(solution, *args)``, zero at the solution.
        argnums: index or tuple of indices (>= 1) of the solver's positional arguments to
            differentiate with respect to.
        has_aux: whether the solver returns ``(solution, aux)``; ``aux`` is passed through.
        solve: a linear solver ``solve(matvec, b)`` for the transposed Jacobian system (default
            :func:`diffopt.linear_solve.solve_normal_cg`; use
            :func:`~diffopt.linear_solve.solve_cg` when ``F`` is the gradient of an objective, whose
            Jacobian is a symmetric Hessian).

    Returns:
        A decorator turning ``solver_fn`` into a function with the same signature whose solution is
        differentiable with respect to the arguments selected by ``argnums``.

    Raises:
        TypeError / ValueError: at decoration for bad ``argnums`` (0, negative, repeated) and, when
            called, for ``argnums`` beyond the solver's positional arguments, or selecting an
            argument with no floating-point tensor; in the backward pass when ``optimality_fn``
            returns a tree unlike the solution.

    Example:
        Ridge regression, ``w*(lam) = argmin ||X w - y||^2 / 2 + lam ||w||^2 / 2``, solved by
        gradient descent under ``torch.no_grad`` and differentiated with respect to ``lam``:

        >>> import torch
        >>> from diffopt import linear_solve
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(20, 3, generator=g, dtype=torch.float64)
        >>> y = torch.randn(20, generator=g, dtype=torch.float64)
        >>> def optimality(w, lam):
        ...     return X.T @ (X @ w - y) + lam * w
        >>> @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg(rtol=1e-12))
        ... def ridge(w, lam):
        ...     with torch.no_grad():
        ...         for _ in range(2000):
        ...             w -= 0.02 * optimality(w, lam)
        ...     return w
        >>> lam = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
        >>> w = ridge(torch.zeros(3, dtype=torch.float64), lam)
        >>> (dw,) = torch.autograd.grad(w.sum(), lam)
        >>> H = X.T @ X + lam.detach() * torch.eye(3, dtype=torch.float64)
        >>> torch.allclose(dw, -(torch.linalg.solve(H, w.detach())).sum())
        True
    """
    if not callable(optimality_fn):
        raise TypeError(f"optimality_fn must be callable, got {type(optimality_fn).__name__}")
    argnums_tuple = _normalize_argnums(argnums)
    if solve is None:
        solve = linear_solve.solve_normal_cg()
    if not callable(solve):
        raise TypeError(
            f"solve must be a linear solver solve(matvec, b), got {type(solve).__name__} (did "
            "you pass diffopt.linear_solve.solve_cg instead of solve_cg()? both work)"
        )
    optimality_kwargs = _keyword_filter(optimality_fn)

    def decorator(solver_fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(solver_fn):
            raise TypeError(f"custom_root decorates a callable, got {type(solver_fn).__name__}")
        try:
            signature: inspect.Signature | None = inspect.signature(solver_fn)
        except (TypeError, ValueError):
            signature = None

        @functools.wraps(solver_fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if signature is not None:
                bound = signature.bind(*args, **kwargs)
                args, kwargs = bound.args, bound.kwargs
            num_args = len(args)
            for argnum in argnums_tuple:
                if argnum >= num_args:
                    raise ValueError(
                        f"argnums={argnum} is out of range: the solver received {num_args} "
                        f"positional argument(s), indices 0..{num_args - 1} (0 is the initial "
                        "guess)"
                    )
            arg_leaves, arg_spec = optree_core.tree_flatten([args[i] for i in argnums_tuple])
            diff_positions = [k for k, leaf in enumerate(arg_leaves) if _is_differentiable(leaf)]
            for argnum in argnums_tuple:
                if not any(
                    _is_differentiable(leaf) for leaf in optree_core.tree_leaves(args[argnum])
                ):
                    raise TypeError(
                        f"argument {argnum} selected by argnums holds no floating-point tensor "
                        f"to differentiate (got {type(args[argnum]).__name__})"
                    )
            detached = list(arg_leaves)
            for position in diff_positions:
                detached[position] = arg_leaves[position].detach()
            solver_args = list(args)
            for argnum, tree in zip(argnums_tuple, optree_core.tree_unflatten(arg_spec, detached)):
                solver_args[argnum] = tree

            output = solver_fn(*solver_args, **kwargs)
            aux = None
            if has_aux:
                if not (isinstance(output, tuple) and len(output) == 2):
                    raise TypeError(
                        "custom_root(has_aux=True): the solver must return a (solution, aux) "
                        f"pair, got {type(output).__name__}"
                    )
                output, aux = output
            solution_leaves, solution_spec = optree_core.tree_flatten(output)
            if not solution_leaves or not all(
                isinstance(leaf, torch.Tensor) for leaf in solution_leaves
            ):
                raise TypeError(
                    "custom_root: the solver must return a tensor or a non-empty pytree of "
                    f"tensors, got {output!r:.200}"
                )
            solution_leaves = [leaf.detach() for leaf in solution_leaves]
            differentiated = [arg_leaves[k] for k in diff_positions]
            if torch.is_grad_enabled() and any(t.requires_grad for t in differentiated):
                problem = _RootProblem(
                    optimality_fn=optimality_fn,
                    optimality_kwargs=optimality_kwargs(dict(kwargs)),
                    solve=solve,
                    args=tuple(args),
                    argnums=argnums_tuple,
                    arg_leaves=tuple(arg_leaves),
                    arg_spec=arg_spec,
                    diff_positions=tuple(diff_positions),
                    solution_leaves=tuple(solution_leaves),
                    solution_spec=solution_spec,
                    solution_shapes=tuple(leaf.shape for leaf in solution_leaves),
                )
                solution_leaves = list(_ImplicitRoot.apply(problem, *differentiated))
                problem.solution_leaves = ()  # autograd saved them; keep no second reference
            solution = optree_core.tree_unflatten(solution_spec, solution_leaves)
            return (solution, aux) if has_aux else solution

        return wrapped

    return decorator
