"""``ImplicitMetaGradientModule``: a module whose ``solve()`` is differentiated implicitly.

Subclass it, keep the meta-parameters (tensors that require grad, or modules, passed to the
constructor; see :class:`diffopt.nn.MetaGradientModule`) and the inner parameters (ordinary
parameters) apart, and define ``objective()`` (the inner loss) or ``optimality()`` (a residual that
is zero at the solution), and ``solve()`` (any inner optimization that updates the parameters).
After ``solve(...)``, the module's parameters are the solution as a differentiable function of the
meta-parameters, by the implicit function theorem (:func:`diffopt.diff.implicit.custom_root`): the
outer loss back-propagates into the meta-parameters without unrolling the inner loop.
"""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from diffopt import linear_solve as _linear_solve
from diffopt.diff.implicit.decorator import custom_root
from diffopt.nn._reparametrize import reparametrize, swap_tensors
from diffopt.nn.module import MetaGradientModule

__all__ = [
    "ImplicitMetaGradientModule",
    "enable_implicit_gradients",
    "make_optimality_from_objective",
]

LinearSolver = Callable[[Callable[[Any], Any], Any], Any]


def _overrides(cls: type, name: str) -> bool:
    return inspect.getattr_static(cls, name) is not inspect.getattr_static(
        ImplicitMetaGradientModule, name
    )


def _as_parameter_tuple(residual: Any, names: tuple[str, ...]) -> Any:
    """Accept an optimality residual as a tuple, list, single tensor or name-keyed dict."""
    if isinstance(residual, torch.Tensor) and len(names) == 1:
        return (residual,)
    if isinstance(residual, list):
        return tuple(residual)
    if isinstance(residual, dict) and set(residual) == set(names):
        return tuple(residual[name] for name in names)
    return residual


def _named(module: ImplicitMetaGradientModule) -> tuple[tuple, tuple, tuple, tuple]:
    named_params = tuple(module.named_parameters())
    named_meta = tuple(module.named_meta_parameters())
    kind = type(module).__name__
    if not named_params:
        raise RuntimeError(f"{kind} has no parameters to solve for (its inner parameters)")
    if not named_meta:
        raise RuntimeError(
            f"{kind} has no meta-parameters: pass them (tensors that require grad, or modules) to "
            "the constructor and assign them as attributes, or call register_meta_parameter()"
        )
    names, params = zip(*named_params)
    meta_names, metas = zip(*named_meta)
    return names, params, meta_names, metas


def _enable_implicit_gradients(cls: type[ImplicitMetaGradientModule]) -> None:
    user_solve = cls.solve

    @functools.wraps(user_solve)
    def solve(self: ImplicitMetaGradientModule, *input: Any, **kwargs: Any) -> Any:
        names, params, meta_names, metas = _named(self)
        stale = [(n, p) for n, p in zip(names, params) if not isinstance(p, torch.nn.Parameter)]
        if stale:  # the solution of a previous solve(): restart from a fresh Parameter copy of it
            swap_tensors(self, [(n, torch.nn.Parameter(p.detach().clone())) for n, p in stale])
            names, params, meta_names, metas = _named(self)

        def optimality_fn(flat_params, flat_metas, *input, **kwargs):
            with reparametrize(self, zip(meta_names, flat_metas)):
                return self._optimality_at(names, flat_params, *input, **kwargs)

        def solver_fn(flat_params, flat_metas, *input, **kwargs):
            # The user's solver sees detached meta-parameters: nothing it does reaches them. It
            # runs with grad enabled (gradient-based solvers need it even in a no_grad caller).
            with reparametrize(self, zip(meta_names, flat_metas)), torch.enable_grad():
                output = user_solve(self, *input, **kwargs)
            solved = tuple(self.named_parameters())
            if tuple(n for n, _ in solved) != names:
                raise RuntimeError(
                    f"{type(self).__name__}.solve() changed the set of parameters: "
                    f"{names} -> {tuple(n for n, _ in solved)}"
                )
            return tuple(p.detach() for _, p in solved), output

        solver = type(self).linear_solve
        root = custom_root(
            optimality_fn,
            argnums=1,
            has_aux=True,
            solve=_linear_solve.solve_normal_cg() if solver is None else solver,
        )(solver_fn)
        solution, output = root(params, metas, *input, **kwargs)
        swap_tensors(self, zip(names, solution))
        return output

    solve.__implicit_gradients_enabled__ = True  # type: ignore[attr-defined]
    cls.solve = solve  # type: ignore[method-assign]


def enable_implicit_gradients(
    cls: type[ImplicitMetaGradientModule],
) -> type[ImplicitMetaGradientModule]:
    """Make ``cls.solve`` differentiable by the implicit function theorem; return ``cls``.

    Subclasses that define ``solve`` get this automatically; call it yourself only for a class
    whose ``solve`` was attached after the class was created. Enabling twice is a ``TypeError``
    (the backward pass would solve the linear system twice over).

    Args:
        cls: a subclass of :class:`ImplicitMetaGradientModule`.

    Returns:
        ``cls`` itself, with ``solve`` wrapped.

    Example:
        >>> import torch
        >>> class Inner(ImplicitMetaGradientModule):
        ...     def objective(self):
        ...         return (self.x - self.theta).pow(2).sum()
        ...     def solve(self):
        ...         pass
        >>> try:
        ...     enable_implicit_gradients(Inner)
        ... except TypeError as error:
        ...     print('TypeError')
        TypeError
    """
    if getattr(cls.solve, "__implicit_gradients_enabled__", False):
        raise TypeError(f"{cls.__name__}.solve() already has implicit gradients enabled")
    _enable_implicit_gradients(cls)
    return cls


def _objective_gradient(module: ImplicitMetaGradientModule, flat_params: tuple, *input: Any,
                        **kwargs: Any) -> tuple[torch.Tensor, ...]:
    # The gradient of the inner objective with respect to the parameters, kept differentiable
    # (create_graph) so that the backward pass can differentiate it again.
    with torch.enable_grad():
        loss = module.objective(*input, **kwargs)
        if not (isinstance(loss, torch.Tensor) and loss.ndim == 0):
            raise ValueError(
                f"{type(module).__name__}.objective() must return a scalar tensor, got "
                f"{getattr(loss, 'shape', type(loss).__name__)}"
            )
        grads = torch.autograd.grad(loss, flat_params, create_graph=True, allow_unused=True)
    return tuple(torch.zeros_like(p) if g is None else g for g, p in zip(grads, flat_params))


def make_optimality_from_objective(
    cls: type[ImplicitMetaGradientModule],
) -> type[ImplicitMetaGradientModule]:
    """Give ``cls`` an ``optimality()`` method: the gradient of its ``objective()``; return ``cls``.

    This is what a subclass that defines only ``objective`` uses implicitly; calling it makes the
    derived residual an ordinary method (e.g. to inspect it after ``solve``).

    Args:
        cls: a subclass of :class:`ImplicitMetaGradientModule` that defines ``objective``; a
            ``TypeError`` is raised otherwise.

    Returns:
        ``cls`` itself, with ``optimality`` set.

    Example:
        >>> import torch
        >>> class Inner(ImplicitMetaGradientModule):
        ...     def __init__(self, theta):
        ...         super().__init__()
        ...         self.theta = theta
        ...         self.x = torch.nn.Parameter(torch.zeros(2))
        ...     def objective(self):
        ...         return (self.x - self.theta).pow(2).sum()
        ...     def solve(self):
        ...         pass
        >>> inner = make_optimality_from_objective(Inner)(torch.ones(2, requires_grad=True))
        >>> inner.optimality()[0]  # d/dx |x - theta|^2 = 2 (x - theta)
        tensor([-2., -2.], grad_fn=<MulBackward0>)
    """
    if not _overrides(cls, "objective"):
        raise TypeError(f"{cls.__name__} defines no objective() to derive optimality() from")

    def optimality(self: ImplicitMetaGradientModule, *input: Any, **kwargs: Any) -> tuple:
        params = tuple(self.parameters())
        if not params:
            raise RuntimeError(f"{type(self).__name__} has no parameters to differentiate for")
        return _objective_gradient(self, params, *input, **kwargs)

    cls.optimality = optimality  # type: ignore[method-assign]
    return cls


class ImplicitMetaGradientModule(MetaGradientModule, metaclass=abc.ABCMeta):
    """Base class for inner-problem modules differentiated by implicit differentiation.

    Subclasses define ``objective(*input)`` (a scalar inner loss; its gradient with respect to the
    parameters becomes the optimality condition) or ``optimality(*input)`` (a residual, one tensor
    per parameter in ``parameters()`` order, zero at the solution), and ``solve(*input)``, which
    updates the parameters by any means (``torch.optim``, closed forms, in-place steps). The linear
    solver of the backward pass is chosen with the class keyword ``linear_solve`` (default
    :func:`diffopt.linear_solve.solve_normal_cg`), as in TorchOpt.

    Args:
        *args: the subclass's constructor arguments; tensors that require grad and modules among
            them become meta-parameters and meta-modules (see :class:`MetaGradientModule`).
        **kwargs: the same, for keyword arguments.
        linear_solve: class keyword (``class Inner(ImplicitMetaGradientModule, linear_solve=...)``):
            the solver ``(matvec, b) -> x`` of the backward pass's linear system; a subclass that
            leaves it out inherits its parent's.

    Example:
        iMAML's proximal inner problem, ``phi* = argmin L(phi) + lam/2 ||phi - theta||^2``:

        >>> import torch
        >>> from diffopt import linear_solve
        >>> from diffopt.nn import ImplicitMetaGradientModule
        >>> class Inner(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg()):
        ...     def __init__(self, theta, lam=1.0):
        ...         super().__init__()
        ...         self.theta = theta  # a meta-parameter: it was passed to the constructor
        ...         self.phi = torch.nn.Parameter(theta.detach().clone())
        ...         self.lam = lam
        ...     def objective(self, x, y):
        ...         task = (x @ self.phi - y).pow(2).mean()
        ...         return task + self.lam / 2 * (self.phi - self.theta).pow(2).sum()
        ...     def solve(self, x, y):
        ...         optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        ...         for _ in range(200):
        ...             optimizer.zero_grad()
        ...             self.objective(x, y).backward(inputs=list(self.parameters()))
        ...             optimizer.step()
        ...         return self
        >>> theta = torch.zeros(3, requires_grad=True)
        >>> x, y = torch.eye(3), torch.tensor([1.0, 2.0, 3.0])
        >>> inner = Inner(theta).solve(x, y)
        >>> inner.phi.sum().backward()  # d phi*/d theta = lam (H + lam)^-1 with H = 2/3 I
        >>> theta.grad
        tensor([0.6000, 0.6000, 0.6000])
    """

    linear_solve: LinearSolver | None = None

    def __init_subclass__(cls, linear_solve: LinearSolver | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if linear_solve is not None:
            if not callable(linear_solve):
                raise TypeError(
                    f"linear_solve must be a solver (matvec, b) -> x such as "
                    f"diffopt.linear_solve.solve_cg(), got {type(linear_solve).__name__}"
                )
            cls.linear_solve = linear_solve
        for name in ("solve", "objective", "optimality"):
            attribute = inspect.getattr_static(cls, name)
            if isinstance(attribute, (staticmethod, classmethod)):
                raise TypeError(f"{cls.__name__}.{name}() must be a plain method")
            if not callable(attribute):
                raise TypeError(f"{cls.__name__}.{name} must be a method, got "
                                f"{type(attribute).__name__}")
        if not (_overrides(cls, "optimality") or _overrides(cls, "objective")):
            raise TypeError(
                f"{cls.__name__} must define objective() (the inner loss) or optimality() (a "
                "residual that is zero at the solution)"
            )
        if "solve" in cls.__dict__ and not getattr(
            cls.__dict__["solve"], "__implicit_gradients_enabled__", False
        ):
            _enable_implicit_gradients(cls)

    @abc.abstractmethod
    def solve(self, *input: Any, **kwargs: Any) -> Any:
        """Solve the inner problem, updating ``self.parameters()``; return anything (often self).

        It runs with grad enabled, even when called under :func:`torch.no_grad`, and sees the
        meta-parameters detached, so ``self.objective(...).backward()`` accumulates gradients
        into the parameters only.
        """
        raise NotImplementedError(f"{type(self).__name__} must define solve()")

    def objective(self, *input: Any, **kwargs: Any) -> torch.Tensor:
        """The inner objective (a scalar); optional when :meth:`optimality` is defined."""
        raise NotImplementedError(f"{type(self).__name__} must define objective()")

    def optimality(self, *input: Any, **kwargs: Any) -> Any:
        """The optimality residual at the current parameters, one tensor per parameter.

        Defaults to the gradient of :meth:`objective` with respect to the parameters (the KKT
        condition of an unconstrained minimum). A fixed-point map ``T`` gives ``T(params) -
        params`` instead.
        """
        raise NotImplementedError(f"{type(self).__name__} must define optimality()")

    def _optimality_at(
        self, names: tuple[str, ...], flat_params: tuple[torch.Tensor, ...], *input: Any, **kwargs
    ) -> Any:
        with reparametrize(self, zip(names, flat_params)):
            if _overrides(type(self), "optimality"):
                return _as_parameter_tuple(self.optimality(*input, **kwargs), names)
            return _objective_gradient(self, flat_params, *input, **kwargs)
