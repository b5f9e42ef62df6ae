"""Hyper-parameters as optimizer state: read, scheduled, or learned by meta-gradients.

:func:`inject_hyperparams` wraps an alias (``diffopt.adam``...) so that its numeric arguments
live in the optimizer state (``state.hyperparams``) instead of being baked into the functions.
Each update rebuilds the alias from the current values, so a value changed in the state, a
schedule of the step count, or a tensor that requires grad (a learned learning rate) all act on
the next step, and an outer loss back-propagates into such a tensor through every inner step.

Example:
    >>> import torch
    >>> import diffopt
    >>> tx = diffopt.inject_hyperparams(diffopt.sgd)(lr=0.5)
    >>> params = [torch.tensor([1.0])]
    >>> state = tx.init(params)
    >>> state.hyperparams['lr']
    0.5
    >>> state.hyperparams['lr'] = 0.25  # takes effect on the next update
    >>> tx.update([torch.tensor([2.0])], state, params=params)[0]
    [tensor([-0.5000])]
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import torch

from diffopt.base import GradientTransformation

__all__ = ["InjectHyperparamsState", "inject_hyperparams"]


class InjectHyperparamsState(NamedTuple):
    """State of :func:`inject_hyperparams`: the step count, the hyper-parameters, the inner state.

    Attributes:
        count: the number of updates made so far (an int64 0-d tensor); schedules are called
            with it.
        hyperparams: a dict from the alias's argument names to the values the last update used
            (``init``'s values before the first update): numbers, tensors, schedules' values,
            or tuples of them (``betas``). Assigning to an entry changes the next update,
            except for scheduled entries, which the schedule overwrites.
        inner_state: the wrapped optimizer's own state.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.inject_hyperparams(diffopt.adam)(lr=0.1, betas=(0.5, 0.75))
        >>> state = tx.init([torch.zeros(1)])
        >>> int(state.count), state.hyperparams['betas'], state.hyperparams['eps']
        (0, (0.5, 0.75), 1e-08)
    """

    count: torch.Tensor
    hyperparams: dict[str, Any]
    inner_state: Any


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_hyper(value: Any) -> bool:
    """A number, a tensor or a schedule (any callable)."""
    return _is_number(value) or isinstance(value, torch.Tensor) or callable(value)


def _evaluate(spec: Any, current: Any, count: torch.Tensor) -> Any:
    """The value of one hyper-parameter at step ``count``.

    ``spec`` is what the user passed (a schedule is called on the count); otherwise the value is
    the state's ``current`` one, which the user may have replaced.
    """
    if isinstance(spec, tuple):
        return tuple(_evaluate(s, c, count) for s, c in zip(spec, current))
    if callable(spec):
        return spec(count)
    return current


def inject_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
) -> Callable[..., GradientTransformation]:
    """Make an optimizer's numeric arguments state that can be read, scheduled and learned.

    ``inject_hyperparams(diffopt.adam)(lr=..., betas=...)`` takes the wrapped alias's own
    arguments. Every argument (the defaults included) that is a number, a tensor, a schedule (a
    callable of the step count) or a tuple of these becomes an entry of ``state.hyperparams``;
    the others (booleans, ``None``, strings, a ``mask``, and the names in ``static_args``) are
    fixed. Each update evaluates the schedules at the step count, rebuilds the alias from the
    current values, and runs its update on the inner state.

    A tensor argument is used as it is, so the updates are differentiable functions of it: an
    outer loss of parameters reached by unrolled ``inplace=False`` updates (or by a
    :class:`~diffopt.MetaOptimizer`, or a ``custom_root`` solution) back-propagates into a
    learned ``lr`` or ``betas`` tensor. Numbers stay Python numbers, so the alias keeps its fast
    paths. An argument that switches a part of the optimizer on or off by being zero
    (``momentum``, ``weight_decay``) must not cross zero once the state exists: the inner state
    would no longer fit.

    Args:
        inner_factory: the alias to wrap, e.g. :func:`diffopt.adam`.
        static_args: names of numeric arguments to keep fixed (not in the state).

    Returns:
        A function taking ``inner_factory``'s arguments and returning a
        :class:`~diffopt.base.GradientTransformation` whose state is an
        :class:`InjectHyperparamsState`.

    Raises:
        TypeError: when the arguments do not fit ``inner_factory``'s signature, or a tuple mixes
            hyper-parameters with other values.

    Example:
        >>> import torch
        >>> import diffopt
        >>> lr = torch.tensor(0.5, requires_grad=True)
        >>> tx = diffopt.inject_hyperparams(diffopt.sgd)(lr=lr, momentum=0.5)
        >>> params = [torch.tensor([1.0])]
        >>> state = tx.init(params)
        >>> updates, state = tx.update([torch.tensor([2.0])], state, params=params, inplace=False)
        >>> updates[0].backward()
        >>> lr.grad  # d(-lr * g)/d lr
        tensor(-2.)
    """
    fixed = {static_args} if isinstance(static_args, str) else set(static_args)
    fixed.add("mask")  # a pytree or a function of the params, never a hyper-parameter
    signature = inspect.signature(inner_factory)
    name = getattr(inner_factory, "__name__", "inner_factory")

    @functools.wraps(inner_factory)
    def wrapped_factory(*args: Any, **kwargs: Any) -> GradientTransformation:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"inject_hyperparams({name}): {error}") from None
        bound.apply_defaults()
        static: dict[str, Any] = {}
        specs: dict[str, Any] = {}
        for key, value in bound.arguments.items():
            if key in fixed:
                static[key] = value
            elif isinstance(value, tuple) and value and all(_is_hyper(v) for v in value):
                specs[key] = value
            elif isinstance(value, tuple) and any(
                isinstance(v, torch.Tensor) or callable(v) for v in value
            ):
                raise TypeError(
                    f"inject_hyperparams({name}): {key} mixes tensors or schedules "
                    f"with other values: {value!r}"
                )
            elif _is_hyper(value) and not isinstance(value, type):
                specs[key] = value
            else:
                static[key] = value

        def values_at(count: torch.Tensor, current: dict[str, Any]) -> dict[str, Any]:
            return {key: _evaluate(spec, current[key], count) for key, spec in specs.items()}

        def build(values: dict[str, Any]) -> GradientTransformation:
            return inner_factory(**static, **values)

        def init_fn(params):
            count = torch.zeros((), dtype=torch.int64)
            values = values_at(count, specs)
            return InjectHyperparamsState(
                count=count, hyperparams=values, inner_state=build(values).init(params)
            )

        def update_fn(updates, state, *, params=None, inplace=True):
            if not isinstance(state, InjectHyperparamsState):
                raise TypeError(
                    f"inject_hyperparams({name}): expected an "
                    f"InjectHyperparamsState (from init), got {type(state).__name__}"
                )
            missing = specs.keys() - state.hyperparams.keys()
            if missing:
                raise KeyError(
                    f"inject_hyperparams({name}): state.hyperparams lacks {sorted(missing)}"
                )
            values = values_at(state.count, state.hyperparams)
            updates, inner_state = build(values).update(
                updates, state.inner_state, params=params, inplace=inplace
            )
            return updates, InjectHyperparamsState(
                count=state.count + 1, hyperparams=values, inner_state=inner_state
            )

        return GradientTransformation(init_fn, update_fn)

    return wrapped_factory
