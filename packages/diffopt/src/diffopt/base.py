"""The functional optimizer protocol: a :class:`GradientTransformation` is a pair of pure functions.

``init(params) -> state`` builds the optimizer state for a pytree of parameters;
``update(updates, state, *, params=None, inplace=True) -> (updates, state)`` turns gradients into
updates that :func:`diffopt.apply_updates` adds to the parameters. Optimizers are chains of such
transformations (:func:`diffopt.chain`), as in optax.

With ``inplace=False`` every operation is out of place, so the whole update is differentiable and
an outer loss can back-propagate through it; ``inplace=True`` allows (but does not require) reuse
of the input buffers and is what the PyTorch-style optimizers use.

Example:
    >>> import torch
    >>> import diffopt
    >>> tx = diffopt.sgd(lr=0.1)
    >>> params = {'w': torch.tensor([1.0, 2.0])}
    >>> state = tx.init(params)
    >>> updates, state = tx.update({'w': torch.tensor([1.0, 1.0])}, state, params=params)
    >>> updates['w']
    tensor([-0.1000, -0.1000])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

__all__ = [
    "ChainedGradientTransformation",
    "EmptyState",
    "GradientTransformation",
    "OptState",
    "Params",
    "TransformInitFn",
    "TransformUpdateFn",
    "UninitializedState",
    "Updates",
    "identity",
]

Params = Any  # a pytree of tensors
Updates = Any  # a pytree of tensors shaped like Params (None where there is no gradient)
OptState = Any  # a pytree (usually NamedTuples) of tensors


class TransformInitFn(Protocol):
    """The type of a transformation's ``init(params) -> state`` function.

    Args:
        params: the pytree of parameters the optimizer will update.

    Returns:
        The initial optimizer state (a pytree, usually of NamedTuples of tensors).

    Example:
        >>> import torch
        >>> import diffopt
        >>> init: TransformInitFn = diffopt.adam(lr=0.1).init
        >>> state = init({'w': torch.ones(2)})  # (Adam moments, scaling by -lr)
        >>> state[0].mu['w'], int(state[0].count)
        (tensor([0., 0.]), 0)
    """

    def __call__(self, params: Params) -> OptState: ...


class TransformUpdateFn(Protocol):
    """The type of a transformation's ``update(updates, state, *, params=None, inplace=True)`` function.

    Args:
        updates: a pytree of gradients (or of updates from an earlier transformation).
        state: the state returned by ``init`` or by the previous ``update``.
        params: the current parameters, for transformations that need them (weight decay).
        inplace: allow reusing the input buffers; pass ``False`` to keep every op differentiable.

    Returns:
        ``(new_updates, new_state)``.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.sgd(lr=0.5)
        >>> update: TransformUpdateFn = tx.update
        >>> params = [torch.tensor([2.0])]
        >>> update([torch.tensor([4.0])], tx.init(params), params=params, inplace=False)[0]
        [tensor([-2.])]
    """

    def __call__(
        self, updates: Updates, state: OptState, *, params: Params | None = None,
        inplace: bool = True,
    ) -> tuple[Updates, OptState]: ...


class EmptyState(NamedTuple):
    """The state of a stateless transformation: a NamedTuple with no fields.

    Example:
        >>> import torch
        >>> import diffopt
        >>> state = diffopt.scale(0.5).init([torch.ones(3)])
        >>> state == EmptyState(), len(state)
        (True, 0)
    """


class UninitializedState(NamedTuple):
    """The placeholder state of a transformation whose ``init`` has not run yet: no fields.

    Wrappers that build their state lazily (on the first ``update``) can hold this until then.

    Example:
        >>> state = UninitializedState()
        >>> state == (), isinstance(state, UninitializedState), state == EmptyState()
        (True, True, True)
    """


class GradientTransformation(NamedTuple):
    """A pair of pure functions ``(init, update)`` that together form an optimizer.

    Attributes:
        init: builds the initial state from the parameters.
        update: maps ``(updates, state)`` to ``(new_updates, new_state)``.

    Example:
        >>> import torch
        >>> tx = identity()
        >>> tx.update([torch.tensor(1.0)], tx.init([torch.tensor(0.0)]))[0]
        [tensor(1.)]
    """

    init: Callable[..., OptState]
    update: Callable[..., tuple[Updates, OptState]]

    def chain(self, *others: GradientTransformation) -> ChainedGradientTransformation:
        """This transformation followed by ``others``, as one :class:`ChainedGradientTransformation`.

        Args:
            *others: the transformations that act on the updates after this one.

        Returns:
            The chain; nested chains are flattened into it and identities dropped.

        Example:
            >>> import torch
            >>> import diffopt
            >>> tx = diffopt.scale(2.0).chain(diffopt.scale(3.0))
            >>> type(tx).__name__, tx.update([torch.tensor(1.0)], tx.init(None))[0]
            ('ChainedGradientTransformation', [tensor(6.)])
        """
        return ChainedGradientTransformation(self, *others)


def _check_transformation(index: int, transformation: Any) -> None:
    if not (isinstance(transformation, tuple) and len(transformation) == 2
            and callable(transformation[0]) and callable(transformation[1])):
        raise TypeError(
            f"chain: argument {index} is not a GradientTransformation: {transformation!r}"
        )


class ChainedGradientTransformation(GradientTransformation):
    """Several transformations applied one after the other, as one :class:`GradientTransformation`.

    The state is a flat tuple with one entry per member. Members that are themselves chains are
    spliced in (``chain(a, chain(b, c))`` has the members ``(a, b, c)`` and a state of three
    entries) and identities are dropped, as TorchOpt does; :func:`diffopt.chain` builds one
    from two or more transformations. Two chains are equal when their members are.

    Args:
        *transformations: the transformations, in the order they act on the updates.

    Attributes:
        transformations: the flattened members, a tuple of :class:`GradientTransformation`.

    Example:
        >>> import torch
        >>> import diffopt
        >>> inner = ChainedGradientTransformation(diffopt.scale(2.0), diffopt.scale(3.0))
        >>> tx = ChainedGradientTransformation(diffopt.trace(momentum=0.0), inner)
        >>> len(tx.transformations), len(tx.init([torch.zeros(1)]))
        (3, 3)
        >>> tx.update([torch.ones(1)], tx.init([torch.zeros(1)]))[0]
        [tensor([6.])]
    """

    transformations: tuple[GradientTransformation, ...]

    def __new__(cls, *transformations: GradientTransformation) -> ChainedGradientTransformation:
        # One pass: check, splice nested chains in, drop identities (a MAML loop builds an
        # optimizer per task, so construction is on the hot path too).
        spliced: list[GradientTransformation] = []
        for index, t in enumerate(transformations):
            _check_transformation(index, t)
            if isinstance(t, ChainedGradientTransformation):
                spliced.extend(t.transformations)
            elif not isinstance(t, IdentityGradientTransformation):
                spliced.append(t)
        # A chain of identities still needs a state of its own.
        members = tuple(spliced) if spliced else (_IDENTITY,)
        init_fns = tuple(t.init for t in members)
        plan = _fusion_plan(members)

        if len(init_fns) == 1:
            only_init = init_fns[0]

            def init_fn(params):
                return (only_init(params),)
        else:
            def init_fn(params):
                return tuple(fn(params) for fn in init_fns)

        def check(state):
            if not isinstance(state, tuple) or len(state) != len(members):
                size = len(state) if isinstance(state, tuple) else type(state).__name__
                raise ValueError(
                    f"chain: expected a state with {len(members)} entries (one per chained "
                    f"transformation, as init returns), got {size}"
                )

        def run(updates, state, params, inplace, add_to):
            check(state)
            new_state = list(state)
            last = len(plan) - 1
            for k, (i, update, factor) in enumerate(plan):
                if factor is None:
                    updates, new_state[i] = update(updates, state[i], params=params,
                                                   inplace=inplace)
                else:  # the scale's state is stateless and stays as it is
                    updates, new_state[i] = update(updates, state[i], factor,
                                                   add_to if k == last else None)
            return updates, tuple(new_state)

        stateless = getattr(plan[0][1], "stateless", None) if len(plan) == 1 else None
        if stateless is not None and plan[0][2] is None:
            # sgd(lr) is one scale: its updates from the member's own function, its state as
            # it came (a stateless member's entry never changes).
            def update_fn(updates, state, *, params=None, inplace=True):
                if type(state) is not tuple or len(state) != 1:  # the check's cheap half first
                    check(state)
                return stateless(updates), state
        elif len(plan) == 1 and plan[0][2] is None:  # one member: call it
            only = plan[0][1]

            def update_fn(updates, state, *, params=None, inplace=True):
                if type(state) is not tuple or len(state) != 1:  # the check's cheap half first
                    check(state)
                updates, inner = only(updates, state[0], params=params, inplace=inplace)
                return updates, (inner,)
        else:
            def update_fn(updates, state, *, params=None, inplace=True):
                return run(updates, state, params, inplace, None)

        def update_and_apply(updates, state, params):
            """``(new param leaves, new state)`` for flat ``updates`` and ``params``, out of place."""
            if plan[-1][2] is None:
                updates, state = run(updates, state, params, False, None)
                from diffopt.update import add_leaves

                return add_leaves(list(params), list(updates)), state
            return run(updates, state, params, False, params)

        instance = super().__new__(cls, init_fn, update_fn)
        instance.transformations = members
        # Used by MetaOptimizer and FuncOptimizer: the update and ``params + updates`` at once.
        instance._update_and_apply = update_and_apply  # type: ignore[attr-defined]
        return instance

    def __repr__(self) -> str:
        members = ",\n    ".join(repr(t) for t in self.transformations)
        return f"{type(self).__name__}(\n    {members},\n)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChainedGradientTransformation):
            return self.transformations == other.transformations
        if isinstance(other, GradientTransformation):
            return self.transformations == (other,)
        return False

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.transformations)

    def __reduce__(self):
        return type(self), self.transformations


def _fusion_plan(members: tuple) -> list[tuple[int, Callable, float | None]]:
    """How a chain runs its members: ``(index, update, None)`` for a member run on its own, or
    ``(index, scaled_update, factor)`` for a member followed by a constant :func:`scale`.

    A member whose update offers ``scaled_update(updates, state, factor, add_to)`` (Adam) takes
    the scale's factor into its own arithmetic: ``chain(scale_by_adam(), scale(-lr))`` is then one
    multiplication less per step, and when the pair ends the chain the parameters are added in
    the same op (``addcdiv``). Same state, same numbers up to rounding.
    """
    plan: list[tuple[int, Callable, float | None]] = []
    i = 0
    while i < len(members):
        scaled = getattr(members[i].update, "scaled_update", None)
        factor = (getattr(members[i + 1].update, "constant_factor", None)
                  if i + 1 < len(members) else None)
        if scaled is not None and factor is not None:
            plan.append((i, scaled, factor))
            i += 2
        else:
            plan.append((i, members[i].update, None))
            i += 1
    return plan


def _identity_init(params: Params) -> OptState:
    del params
    return EmptyState()


def _identity_update(updates, state, *, params=None, inplace=True):
    del params, inplace
    return updates, state


class IdentityGradientTransformation(GradientTransformation):
    """The transformation that returns the updates unchanged (what :func:`identity` returns).

    Chains drop it, so ``chain(identity(), tx)`` has the state of ``chain(tx)``.

    Example:
        >>> import torch
        >>> tx = IdentityGradientTransformation()
        >>> tx.update([torch.tensor(4.0)], tx.init(None))
        ([tensor(4.)], EmptyState())
    """

    def __new__(cls) -> IdentityGradientTransformation:
        return super().__new__(cls, _identity_init, _identity_update)

    def __getnewargs__(self) -> tuple:
        return ()


def identity() -> GradientTransformation:
    """A stateless transformation that returns the updates unchanged.

    Returns:
        A :class:`GradientTransformation` whose state is :class:`EmptyState`; chains drop it.

    Example:
        >>> import torch
        >>> tx = identity()
        >>> state = tx.init({'a': torch.zeros(1)})
        >>> tx.update({'a': torch.tensor([0.25])}, state)
        ({'a': tensor([0.2500])}, EmptyState())
    """
    return _IDENTITY


# Immutable and stateless, so every identity() (and every chain of identities) can share it.
_IDENTITY = IdentityGradientTransformation()
