r"""``zero_order``: evolution-strategies gradient estimates for black-box scalar objectives.

For an objective :math:`f` and noise :math:`\varepsilon` from a distribution with zero mean and
identity covariance (e.g. a standard normal), the Gaussian smoothing
:math:`f_\sigma(\theta) = \mathbb{E}[f(\theta + \sigma \varepsilon)]` has gradient
:math:`\nabla f_\sigma(\theta) = \mathbb{E}[f(\theta + \sigma\varepsilon)\,\varepsilon] / \sigma`
(Nesterov & Spokoiny 2017; Salimans et al. 2017). With :math:`N` samples the estimators are

* ``'naive'``: :math:`\frac{1}{N\sigma}\sum_i f(\theta + \sigma\varepsilon_i)\,\varepsilon_i`;
* ``'forward'``: :math:`\frac{1}{N\sigma}\sum_i \bigl(f(\theta + \sigma\varepsilon_i) -
  f(\theta)\bigr)\,\varepsilon_i` (forward differences, Choromanski et al. 2018): the same mean,
  since :math:`\mathbb{E}[\varepsilon] = 0`, with far less variance when :math:`f(\theta)` is large;
* ``'antithetic'``: :math:`\frac{1}{2N\sigma}\sum_i \bigl(f(\theta + \sigma\varepsilon_i) -
  f(\theta - \sigma\varepsilon_i)\bigr)\,\varepsilon_i` (central differences, for symmetric
  noise), exact for quadratics up to sampling error and cancelling all even-order terms.

All three are unbiased for :math:`\nabla f_\sigma`, which equals :math:`\nabla f` for quadratics.
TorchOpt's ``'forward'`` estimator subtracts a running difference and multiplies by
:math:`\sigma` instead of dividing, so it does not converge to the gradient; this one does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import torch

import optree_core

__all__ = ["Method", "Samplable", "zero_order"]

Method = Literal["naive", "forward", "antithetic"]
METHODS = ("naive", "forward", "antithetic")


@runtime_checkable
class Samplable(Protocol):
    """Anything with ``sample(sample_shape)``, e.g. a :class:`torch.distributions.Distribution`.

    :func:`zero_order` accepts such an object as its ``distribution``; the check is structural
    (``isinstance`` works on any object with a ``sample`` method).

    Example:
        >>> import torch
        >>> class Rademacher:
        ...     def sample(self, sample_shape=torch.Size()):
        ...         return torch.randint(0, 2, sample_shape).float() * 2 - 1
        >>> isinstance(Rademacher(), Samplable), isinstance(torch.distributions.Normal(0.0, 1.0), Samplable)
        (True, True)
        >>> isinstance(lambda shape: torch.randn(shape), Samplable)
        False
    """

    def sample(self, sample_shape: torch.Size = ...) -> torch.Tensor:
        """Return a tensor of shape ``sample_shape`` of i.i.d. noise."""
        ...


def _sampler(distribution: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return ``like -> noise`` drawing noise shaped like the tensor ``like``."""
    if isinstance(distribution, Samplable):
        draw = distribution.sample
        what = f"{type(distribution).__name__}.sample"
    elif callable(distribution):
        draw = distribution
        what = getattr(distribution, "__name__", type(distribution).__name__)
    else:
        raise TypeError(
            "distribution must be a torch.distributions.Distribution, an object with a "
            "sample(sample_shape) method, or a function sample_shape -> noise; got "
            f"{type(distribution).__name__}"
        )

    def sample_like(like: torch.Tensor) -> torch.Tensor:
        noise = torch.as_tensor(draw(like.shape), dtype=like.dtype, device=like.device)
        if noise.shape != like.shape:
            raise ValueError(
                f"zero_order: {what}({tuple(like.shape)}) returned noise of shape "
                f"{tuple(noise.shape)}; it must return one draw per element (a distribution with "
                "scalar parameters, e.g. Normal(0.0, 1.0))"
            )
        return noise

    return sample_like


def _check_configuration(method: Any, num_samples: Any, sigma: Any) -> float:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    if isinstance(sigma, torch.Tensor) and sigma.numel() == 1:
        sigma = float(sigma)
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)):
        raise TypeError(f"sigma must be a positive number, got {type(sigma).__name__}")
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite positive number, got {sigma!r}")
    return float(sigma)


def _normalize_argnums(argnums: int | Sequence[int]) -> tuple[int, ...]:
    values = (argnums,) if isinstance(argnums, int) and not isinstance(argnums, bool) else argnums
    if not isinstance(values, (tuple, list)) or not values:
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"argnums must hold non-negative ints, got {value!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"argnums has repeated entries: {tuple(values)}")
    return tuple(values)


def _as_scalar(value: Any, like: torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.ndim != 0:
            raise ValueError(
                "zero_order: the objective must return a scalar (a 0-d tensor or a Python "
                f"number), got a tensor of shape {tuple(value.shape)}; reduce it first (e.g. "
                ".sum() or .mean())"
            )
        return value.detach()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=like.dtype, device=like.device)
    raise TypeError(
        "zero_order: the objective must return a scalar (a 0-d tensor or a Python number), got "
        f"{type(value).__name__}"
    )


class _Estimate:
    """The objective with its non-differentiated arguments fixed, and the estimator's setup."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def evaluate(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        leaves = list(self.arg_leaves)
        for position, value in zip(self.diff_positions, values):
            leaves[position] = value
        args = list(self.args)
        for argnum, tree in zip(self.argnums, optree_core.tree_unflatten(self.arg_spec, leaves)):
            args[argnum] = tree
        with torch.no_grad():
            return _as_scalar(self.fn(*args, **self.kwargs), values[0])


class _ZeroOrder(torch.autograd.Function):
    """The objective's value in the forward pass; the ES gradient estimate in the backward pass."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, estimate: _Estimate, value: torch.Tensor, *thetas: torch.Tensor
    ):
        ctx.estimate = estimate
        ctx.save_for_backward(value, *thetas)
        return value.detach().clone()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):  # type: ignore[override]
        estimate: _Estimate = ctx.estimate
        value, *thetas = ctx.saved_tensors
        sigma = estimate.sigma
        totals = [torch.zeros_like(t) for t in thetas]
        for _ in range(estimate.num_samples):
            noises = [estimate.sample_like(t) for t in thetas]
            plus = estimate.evaluate([t + sigma * n for t, n in zip(thetas, noises)])
            if estimate.method == "naive":
                weight = plus
            elif estimate.method == "forward":
                weight = plus - value
            else:
                minus = estimate.evaluate([t - sigma * n for t, n in zip(thetas, noises)])
                weight = 0.5 * (plus - minus)
            for total, noise in zip(totals, noises):
                total.add_(noise * weight.to(noise.dtype))
        scale = grad_output / (estimate.num_samples * sigma)
        return (None, None, *[(total * scale.to(total.dtype)) for total in totals])


def zero_order(
    distribution: Any,
    method: Method = "naive",
    argnums: int | tuple[int, ...] = (0,),
    num_samples: int = 1,
    sigma: float = 1.0,
) -> Callable[[Callable[..., Any]], Callable[..., torch.Tensor]]:
    r"""Make a scalar objective's gradient an evolution-strategies estimate (a decorator).

    The decorated function returns the objective's value; back-propagating through it gives, for
    each argument in ``argnums`` (a tensor or any pytree of tensors), the Monte-Carlo estimate of
    the gradient of the Gaussian smoothing of the objective (see the module docstring for the
    three estimators). The objective is only ever evaluated, under :func:`torch.no_grad`, so it
    may be non-differentiable: call ``.item()``, ``torch.round``, numpy, a simulator... The noise
    is drawn when the gradient is computed, from PyTorch's global random state (seed it with
    :func:`torch.manual_seed` for reproducible estimates). Only the floating-point leaves of the
    ``argnums`` arguments that require grad are perturbed and receive gradients; other inputs get
    none, even if the objective uses them differentiably.

    Args:
        distribution: the noise :math:`\varepsilon`, with zero mean and unit variance per element:
            a :class:`torch.distributions.Distribution` with scalar parameters (e.g.
            ``Normal(0.0, 1.0)``), an object with ``sample(sample_shape)``, or a function
            ``sample_shape -> tensor``.
        method: ``'naive'``, ``'forward'`` or ``'antithetic'``.
        argnums: index or tuple of indices of the positional arguments to estimate gradients for.
        num_samples: number of noise draws :math:`N` per gradient (``'antithetic'`` evaluates the
            objective twice per draw, the others once, ``'forward'`` reusing the forward value).
        sigma: smoothing radius :math:`\sigma > 0`.

    Returns:
        A decorator; the decorated function returns a 0-d tensor.

    Raises:
        ValueError / TypeError: for an unknown ``method``, ``num_samples < 1``, ``sigma <= 0``, a
            bad ``distribution``; when called, for ``argnums`` out of range or an objective that
            does not return a scalar.

    Example:
        On a quadratic the smoothed gradient is the gradient, :math:`A\theta`:

        >>> import torch
        >>> A = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
        >>> @zero_order(lambda shape: torch.randn(shape, dtype=torch.float64),
        ...             method='forward', num_samples=20000, sigma=0.5)
        ... def quadratic(theta):
        ...     return 0.5 * (theta @ A @ theta).item() + 3.0  # .item(): not differentiable
        >>> _ = torch.manual_seed(0)
        >>> theta = torch.tensor([1.0, -1.0], dtype=torch.float64, requires_grad=True)
        >>> quadratic(theta).backward()
        >>> torch.allclose(theta.grad, A @ theta.detach(), atol=0.05)
        True
    """
    sigma = _check_configuration(method, num_samples, sigma)
    argnums_tuple = _normalize_argnums(argnums)
    sample_like = _sampler(distribution)

    def decorator(fn: Callable[..., Any]) -> Callable[..., torch.Tensor]:
        if not callable(fn):
            raise TypeError(f"zero_order decorates a callable, got {type(fn).__name__}")

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
            for argnum in argnums_tuple:
                if argnum >= len(args):
                    raise ValueError(
                        f"argnums={argnum} is out of range: the function received {len(args)} "
                        "positional argument(s)"
                    )
            arg_leaves, arg_spec = optree_core.tree_flatten([args[i] for i in argnums_tuple])
            diff_positions = [
                k
                for k, leaf in enumerate(arg_leaves)
                if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
            ]
            if not diff_positions:
                raise TypeError(
                    f"zero_order: the arguments selected by argnums={argnums_tuple} hold no "
                    "floating-point tensor"
                )
            like = arg_leaves[diff_positions[0]]
            # Only leaves that require grad are perturbed: noise elsewhere only adds variance.
            diff_positions = [k for k in diff_positions if arg_leaves[k].requires_grad]
            if not (torch.is_grad_enabled() and diff_positions):
                return _as_scalar(fn(*args, **kwargs), like)
            thetas = [arg_leaves[k] for k in diff_positions]
            estimate = _Estimate(
                fn=fn,
                args=tuple(args),
                kwargs=kwargs,
                argnums=argnums_tuple,
                arg_leaves=tuple(arg_leaves),
                arg_spec=arg_spec,
                diff_positions=tuple(diff_positions),
                method=method,
                num_samples=num_samples,
                sigma=sigma,
                sample_like=sample_like,
            )
            detached = [t.detach() for t in thetas]
            value = estimate.evaluate(detached)
            return _ZeroOrder.apply(estimate, value, *thetas)

        return wrapped

    return decorator
