"""Wrappers around an optimizer: gradient accumulation, skipping non-finite steps, lookahead.

Each wrapper runs the inner optimizer at every call and chooses between its results and the old
state with tensor selections (``torch.where``) instead of Python branches on tensor values: no
device synchronization, and the same code under ``torch.func`` and ``torch.compile``.

Example:
    >>> import torch
    >>> import diffopt
    >>> tx = diffopt.MultiSteps(diffopt.sgd(lr=1.0), every_k_schedule=2)
    >>> params = [torch.zeros(1)]
    >>> state = tx.init(params)
    >>> u1, state = tx.update([torch.tensor([1.0])], state, params=params)
    >>> u2, state = tx.update([torch.tensor([3.0])], state, params=params)
    >>> u1, u2  # nothing, then minus the mean gradient
    ([tensor([0.])], [tensor([-2.])])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

import optree_core
from diffopt.base import GradientTransformation

__all__ = [
    "ApplyIfFiniteState",
    "LookaheadParams",
    "LookaheadState",
    "MultiSteps",
    "MultiStepsState",
    "apply_if_finite",
    "lookahead",
]


def _select(condition: torch.Tensor, if_true: Any, if_false: Any) -> Any:
    """Leafwise ``if_true`` where the 0-d boolean ``condition`` holds, else ``if_false``.

    Tensor leaves are selected by ``torch.where`` (keeping ``if_false``'s dtype); other leaves
    (``None``, numbers), which a state keeps unchanged, come from ``if_true``.
    """

    def pick(new: Any, old: Any) -> Any:
        if isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor):
            return torch.where(condition.to(new.device), new, old).to(old.dtype)
        return new

    return optree_core.tree_map(pick, if_true, if_false, none_is_leaf=True)


def _check_inner(name: str, inner: Any) -> None:
    if not (
        isinstance(inner, tuple) and len(inner) == 2 and callable(inner[0]) and callable(inner[1])
    ):
        raise TypeError(f"{name}: expected a GradientTransformation, got {inner!r}")


class MultiStepsState(NamedTuple):
    """State of :class:`MultiSteps`.

    Attributes:
        mini_step: the calls since the last inner update (int64 0-d tensor).
        gradient_step: the inner updates made so far (int64 0-d tensor).
        inner_opt_state: the inner optimizer's state.
        acc_grads: the gradients accumulated since the last inner update (their mean, or sum).

    Example:
        >>> import torch
        >>> import diffopt
        >>> state = diffopt.MultiSteps(diffopt.sgd(lr=0.1), 4).init([torch.zeros(2)])
        >>> int(state.mini_step), int(state.gradient_step), state.acc_grads
        (0, 0, [tensor([0., 0.])])
    """

    mini_step: torch.Tensor
    gradient_step: torch.Tensor
    inner_opt_state: Any
    acc_grads: Any


class MultiSteps:
    """Gradient accumulation: one inner update every ``k`` calls, on the gradients' mean.

    Calls that do not complete a group of ``k`` return zero updates and keep the inner state;
    the ``k``-th runs the inner optimizer on the mean (or sum) of the group's gradients. ``k``
    may follow a schedule of the number of inner updates made so far. The inner update is
    computed at every call and selected with tensor operations (as Optax's ``MultiSteps`` does),
    so no step reads a tensor into Python.

    Args:
        opt: the inner optimizer.
        every_k_schedule: ``k`` (a positive int), or a function of the inner update count
            returning it.
        use_grad_mean: accumulate the mean of the gradients (``True``) or their sum.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.MultiSteps(diffopt.sgd(lr=1.0), every_k_schedule=2, use_grad_mean=False)
        >>> params = {'w': torch.zeros(1)}
        >>> state = tx.init(params)
        >>> for g in (1.0, 2.0, 4.0):
        ...     u, state = tx.update({'w': torch.tensor([g])}, state, params=params)
        ...     print(u['w'], bool(tx.has_updated(state)))
        tensor([0.]) False
        tensor([-3.]) True
        tensor([0.]) False
    """

    def __init__(
        self,
        opt: GradientTransformation,
        every_k_schedule: int | Callable[[torch.Tensor], Any],
        use_grad_mean: bool = True,
    ) -> None:
        _check_inner("MultiSteps", opt)
        if callable(every_k_schedule):
            self._every_k = every_k_schedule
        elif (
            isinstance(every_k_schedule, int)
            and not isinstance(every_k_schedule, bool)
            and every_k_schedule >= 1
        ):
            k = every_k_schedule
            self._every_k = lambda step: k
        else:
            raise ValueError(
                f"MultiSteps: every_k_schedule must be a positive int or a "
                f"schedule, got {every_k_schedule!r}"
            )
        self._opt = opt
        self._use_grad_mean = use_grad_mean

    @property
    def inner_opt(self) -> GradientTransformation:
        """The wrapped optimizer."""
        return self._opt

    def init(self, params: Any) -> MultiStepsState:
        """The initial state for ``params``.

        Args:
            params: the pytree of parameters.

        Returns:
            A :class:`MultiStepsState` with zero counters and zero accumulated gradients.
        """
        zero = torch.zeros((), dtype=torch.int64)
        acc = optree_core.tree_map(
            lambda p: (
                torch.zeros_like(p, requires_grad=False) if isinstance(p, torch.Tensor) else p
            ),
            params,
            none_is_leaf=True,
        )
        return MultiStepsState(
            mini_step=zero,
            gradient_step=zero.clone(),
            inner_opt_state=self._opt.init(params),
            acc_grads=acc,
        )

    def update(
        self, updates: Any, state: MultiStepsState, *, params: Any = None, inplace: bool = True
    ) -> tuple[Any, MultiStepsState]:
        """Accumulate ``updates``; on the ``k``-th call, return the inner optimizer's update.

        Args:
            updates: the gradients.
            state: the state from :meth:`init` or the previous call.
            params: the parameters, for inner optimizers that need them.
            inplace: passed to the inner optimizer.

        Returns:
            ``(updates, state)``: zeros on accumulating calls.

        Raises:
            TypeError: when ``state`` is not a :class:`MultiStepsState`.
        """
        if not isinstance(state, MultiStepsState):
            raise TypeError(
                f"MultiSteps: expected a MultiStepsState (from init), got {type(state).__name__}"
            )
        k = self._every_k(state.gradient_step)
        n = state.mini_step

        def accumulate(g: Any, acc: Any) -> Any:
            if g is None:
                return acc
            if self._use_grad_mean:  # a running mean: no division of a large sum
                return acc + (g - acc) / (n + 1).to(acc.dtype)
            return acc + g

        acc = optree_core.tree_map(accumulate, updates, state.acc_grads, none_is_leaf=True)
        grads = optree_core.tree_map(
            lambda g, a: None if g is None else a.to(g.dtype), updates, acc, none_is_leaf=True
        )
        new_updates, new_inner = self._opt.update(
            grads, state.inner_opt_state, params=params, inplace=inplace
        )
        emit = n == (torch.as_tensor(k) - 1)
        out = optree_core.tree_map(
            lambda u: None if u is None else torch.where(emit, u, torch.zeros_like(u)),
            new_updates,
            none_is_leaf=True,
        )
        new_state = MultiStepsState(
            mini_step=(n + 1) % k,
            gradient_step=state.gradient_step + emit.to(torch.int64),
            inner_opt_state=_select(emit, new_inner, state.inner_opt_state),
            acc_grads=optree_core.tree_map(
                lambda a: (
                    torch.where(emit, torch.zeros_like(a), a) if isinstance(a, torch.Tensor) else a
                ),
                acc,
                none_is_leaf=True,
            ),
        )
        return out, new_state

    def has_updated(self, state: MultiStepsState) -> torch.Tensor:
        """Whether the call that returned ``state`` made an inner update (a 0-d bool tensor).

        Args:
            state: a state returned by :meth:`update`.

        Returns:
            ``True`` right after an inner update.
        """
        return (state.mini_step == 0) & (state.gradient_step > 0)

    def gradient_transformation(self) -> GradientTransformation:
        """This wrapper as a :class:`~diffopt.base.GradientTransformation` (to chain it).

        Returns:
            ``GradientTransformation(self.init, self.update)``.
        """
        return GradientTransformation(self.init, self.update)


class ApplyIfFiniteState(NamedTuple):
    """State of :func:`apply_if_finite`.

    Attributes:
        notfinite_count: consecutive calls with a non-finite gradient (int64 0-d tensor).
        last_finite: whether the last call's gradients were all finite (bool 0-d tensor).
        total_notfinite: all calls with a non-finite gradient so far (int64 0-d tensor).
        inner_state: the inner optimizer's state.

    Example:
        >>> import torch
        >>> import diffopt
        >>> state = diffopt.apply_if_finite(diffopt.sgd(lr=0.1), 3).init([torch.zeros(1)])
        >>> int(state.notfinite_count), bool(state.last_finite), int(state.total_notfinite)
        (0, True, 0)
    """

    notfinite_count: torch.Tensor
    last_finite: torch.Tensor
    total_notfinite: torch.Tensor
    inner_state: Any


def apply_if_finite(
    inner: GradientTransformation, max_consecutive_errors: int
) -> GradientTransformation:
    """Skip the updates whose gradients hold an ``inf`` or a NaN, up to a limit.

    A call whose gradients are not all finite returns zero updates and keeps the inner state;
    after more than ``max_consecutive_errors`` such calls in a row the inner update is applied
    anyway (as Optax's ``apply_if_finite`` does), so that a run which only produces non-finite
    gradients shows it in the parameters. The counters are in the state.

    Derivatives through a skipped call are zero for the (discarded) inner update; where that
    update is non-finite its backward may still carry NaN.

    Args:
        inner: the optimizer to protect.
        max_consecutive_errors: the non-finite calls in a row to skip before applying one.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ApplyIfFiniteState`.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.apply_if_finite(diffopt.sgd(lr=1.0), max_consecutive_errors=2)
        >>> params = [torch.zeros(1)]
        >>> state = tx.init(params)
        >>> u, state = tx.update([torch.tensor([float('nan')])], state, params=params)
        >>> u, int(state.notfinite_count), bool(state.last_finite)
        ([tensor([0.])], 1, False)
        >>> u, state = tx.update([torch.tensor([2.0])], state, params=params)
        >>> u, int(state.notfinite_count), int(state.total_notfinite)
        ([tensor([-2.])], 0, 1)
    """
    _check_inner("apply_if_finite", inner)
    if (
        isinstance(max_consecutive_errors, bool)
        or not isinstance(max_consecutive_errors, int)
        or max_consecutive_errors < 0
    ):
        raise ValueError(
            f"apply_if_finite: max_consecutive_errors must be an int >= 0, got "
            f"{max_consecutive_errors!r}"
        )

    def init_fn(params):
        zero = torch.zeros((), dtype=torch.int64)
        return ApplyIfFiniteState(
            notfinite_count=zero,
            last_finite=torch.ones((), dtype=torch.bool),
            total_notfinite=zero.clone(),
            inner_state=inner.init(params),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        if not isinstance(state, ApplyIfFiniteState):
            raise TypeError(
                f"apply_if_finite: expected an ApplyIfFiniteState (from init), got "
                f"{type(state).__name__}"
            )
        leaves = [g for g in optree_core.tree_leaves(updates) if isinstance(g, torch.Tensor)]
        finite = torch.ones((), dtype=torch.bool)
        for g in leaves:  # stays on the leaves' device: no synchronization
            finite = finite & torch.isfinite(g).all()
        notfinite = (~finite).to(torch.int64)
        notfinite_count = (state.notfinite_count + 1) * notfinite
        apply = finite | (notfinite_count > max_consecutive_errors)
        new_updates, new_inner = inner.update(
            updates, state.inner_state, params=params, inplace=inplace
        )
        out = optree_core.tree_map(
            lambda u: (
                None if u is None else torch.where(apply.to(u.device), u, torch.zeros_like(u))
            ),
            new_updates,
            none_is_leaf=True,
        )
        return out, ApplyIfFiniteState(
            notfinite_count=notfinite_count,
            last_finite=finite,
            total_notfinite=state.total_notfinite + notfinite,
            inner_state=_select(apply, new_inner, state.inner_state),
        )

    return GradientTransformation(init_fn, update_fn)


class LookaheadParams(NamedTuple):
    """The parameters :func:`lookahead` updates: the fast and the slow copy.

    Attributes:
        fast: the parameters the fast optimizer steps (gradients are taken at these).
        slow: the slow parameters, moved toward the fast ones every ``sync_period`` steps.

    Example:
        >>> import torch
        >>> params = LookaheadParams.init_synced({'w': torch.ones(2)})
        >>> params.fast['w'] is not params.slow['w'], torch.equal(params.fast['w'], params.slow['w'])
        (True, True)
    """

    fast: Any
    slow: Any

    @classmethod
    def init_synced(cls, params: Any) -> LookaheadParams:
        """Fast and slow parameters both equal to ``params`` (the slow ones a copy).

        Args:
            params: the initial parameters.

        Returns:
            ``LookaheadParams(fast=params, slow=<a copy of params>)``.
        """
        slow = optree_core.tree_map(
            lambda p: p.clone() if isinstance(p, torch.Tensor) else p, params, none_is_leaf=True
        )
        return cls(fast=params, slow=slow)


class LookaheadState(NamedTuple):
    """State of :func:`lookahead`.

    Attributes:
        fast_state: the fast optimizer's state.
        steps_since_sync: fast steps since the last synchronization (int64 0-d tensor).

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.lookahead(diffopt.sgd(lr=0.1), sync_period=3, slow_step_size=0.5)
        >>> int(tx.init(LookaheadParams.init_synced([torch.zeros(1)])).steps_since_sync)
        0
    """

    fast_state: Any
    steps_since_sync: torch.Tensor


def lookahead(
    fast_optimizer: GradientTransformation,
    sync_period: int,
    slow_step_size: float,
    reset_state: bool = False,
) -> GradientTransformation:
    r"""Lookahead (Zhang et al., 2019, arXiv:1907.08610): k steps forward, one step back.

    The fast optimizer steps the fast parameters; every ``sync_period`` steps the slow ones move
    a fraction of the way toward them, :math:`s \leftarrow s + \alpha (f - s)`, and the fast
    ones restart from there. Both moves come out of ``update`` as one
    :class:`LookaheadParams` of updates, which :func:`diffopt.apply_updates` adds to the
    :class:`LookaheadParams` of parameters; do not change them in between.

    Args:
        fast_optimizer: the optimizer of the fast parameters.
        sync_period: fast steps between synchronizations (``>= 1``).
        slow_step_size: the fraction :math:`\alpha` of the way the slow parameters move.
        reset_state: re-initialize the fast optimizer's state at each synchronization.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` whose ``update(grads, state,
        params=lookahead_params)`` takes the gradients at the fast parameters.

    Raises:
        ValueError: when ``sync_period`` is below 1.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.lookahead(diffopt.sgd(lr=1.0), sync_period=2, slow_step_size=0.5)
        >>> params = diffopt.LookaheadParams.init_synced([torch.zeros(1)])
        >>> state = tx.init(params)
        >>> for _ in range(2):
        ...     updates, state = tx.update([torch.tensor([-1.0])], state, params=params)
        ...     params = diffopt.apply_updates(params, updates)
        >>> params.fast, params.slow  # fast went to 2, slow moved halfway and fast restarts there
        ([tensor([1.])], [tensor([1.])])
    """
    _check_inner("lookahead", fast_optimizer)
    if isinstance(sync_period, bool) or not isinstance(sync_period, int) or sync_period < 1:
        raise ValueError(f"lookahead: sync_period must be an int >= 1, got {sync_period!r}")

    def fast_of(params: Any) -> Any:
        return params.fast if isinstance(params, LookaheadParams) else params

    def init_fn(params):
        return LookaheadState(
            fast_state=fast_optimizer.init(fast_of(params)),
            steps_since_sync=torch.zeros((), dtype=torch.int64),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        if not isinstance(params, LookaheadParams):
            raise TypeError(
                "lookahead: update needs params=LookaheadParams(fast, slow) "
                "(LookaheadParams.init_synced(params) makes them)"
            )
        if not isinstance(state, LookaheadState):
            raise TypeError(
                f"lookahead: expected a LookaheadState (from init), got {type(state).__name__}"
            )
        fast_updates, fast_state = fast_optimizer.update(
            updates, state.fast_state, params=params.fast, inplace=inplace
        )
        sync = state.steps_since_sync == sync_period - 1

        def moves(u: Any, f: Any, s: Any) -> tuple[Any, Any]:
            if u is None:
                return None, None
            gap = f + u - s  # the fast parameters after this step, minus the slow ones
            slow_move = torch.where(sync, slow_step_size * gap, torch.zeros_like(gap))
            # on a sync the fast parameters land on the new slow ones: s + a * gap - f
            fast_move = torch.where(sync, u - (1 - slow_step_size) * gap, u)
            return fast_move, slow_move

        pairs = optree_core.tree_map(
            moves, fast_updates, params.fast, params.slow, none_is_leaf=True
        )
        treespec = optree_core.tree_structure(fast_updates, none_is_leaf=True)
        flat = optree_core.tree_leaves(pairs, none_is_leaf=True)
        fast_moves = optree_core.tree_unflatten(treespec, flat[0::2])
        slow_moves = optree_core.tree_unflatten(treespec, flat[1::2])
        if reset_state:
            fast_state = _select(sync, fast_optimizer.init(params.fast), fast_state)
        return LookaheadParams(fast=fast_moves, slow=slow_moves), LookaheadState(
            fast_state=fast_state, steps_since_sync=(state.steps_since_sync + 1) % sync_period
        )

    return GradientTransformation(init_fn, update_fn)
