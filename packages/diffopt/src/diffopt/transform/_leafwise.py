"""Flattening shared by the transformations: one flatten per tree, one loop over the leaves.

Updates may hold ``None`` where a parameter got no gradient; such leaves stay ``None`` and their
state is carried over unchanged (torch.optim skips parameters without a gradient the same way).

Everything here is safe inside ``torch.func`` transforms (``vmap``, ``grad``, ``jvp``...): step
counts stay 0-d int64 tensors and whatever depends on them (bias corrections, schedules) is
computed with tensor ops, never read into Python, so a count batched by ``vmap`` (an ensemble
whose ``init`` ran under ``vmap``) works like a shared one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import optree_core
from diffopt.tree_math import _requires_grad_flag

__all__ = [
    "ScalarTensors",
    "bias_correction",
    "can_use_foreach",
    "check_leaf",
    "count_power",
    "flatten_updates",
    "foreach_allowed",
    "foreach_mul_scalar",
    "pairs_fit",
    "per_dtype",
    "scale_leaf",
    "scale_leaves",
    "tensor_hyperparams",
    "unflatten",
    "zeros_like_params",
]


def flatten_updates(name: str, updates: Any, *trees: Any) -> tuple[Any, list, list[list]]:
    """Flatten ``updates`` (``None`` kept as a leaf) and ``trees``, which must match it.

    Returns:
        ``(treespec, update_leaves, [leaves of each tree])``.

    Raises:
        ValueError: naming ``name`` when a tree's structure differs from the updates'.
    """
    leaves, treespec = optree_core.tree_flatten(updates, none_is_leaf=True)
    others = []
    for tree in trees:
        tree_leaves, tree_spec = optree_core.tree_flatten(tree, none_is_leaf=True)
        if tree_spec != treespec:
            raise ValueError(
                f"{name}: the updates and the optimizer state (or params) have different "
                f"structures: {treespec} vs {tree_spec}"
            )
        others.append(tree_leaves)
    return treespec, leaves, others


def unflatten(treespec: Any, leaves: list) -> Any:
    """Inverse of :func:`flatten_updates` for one list of leaves."""
    return optree_core.tree_unflatten(treespec, leaves)


_TENSOR, _PARAMETER, _STRIDED = torch.Tensor, torch.nn.Parameter, torch.strided
_FLOATS = (torch.float32, torch.float64)
_functorch_active = torch._C._are_functorch_transforms_active
_forward_ad = torch.autograd.forward_ad
_is_compiling = torch.compiler.is_compiling
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def foreach_allowed() -> bool:
    """The global half of :func:`can_use_foreach`: no ``torch.func`` transform, no forward-mode
    AD level and no Dynamo trace is active."""
    return not (_functorch_active() or _forward_ad._current_level >= 0 or _is_compiling())


def can_use_foreach(tensors: list) -> bool:
    """Whether multi-tensor ``torch._foreach_*`` ops may replace a loop of per-leaf ops.

    One foreach op is one autograd node for all the leaves instead of one per leaf, and its
    derivative formulas are themselves differentiable, to any order. The loop stays where the
    foreach ops fall short: under a ``torch.func`` transform (vmap has no batching rule for them
    and would fall back to a slow loop over the batch; ``grad``/``jvp`` need the same numbers as
    the per-leaf math), inside a forward-mode AD level, while Dynamo traces (the per-leaf math
    keeps the step count a tensor), and for leaves other than plain dense float32/float64 tensors
    of one dtype (the formulas use that dtype's smallest normal number; subclasses such as fake
    or sparse tensors keep their own per-op behaviour).
    """
    # The global state first, so a vmapped step declines at once instead of after a walk over
    # its leaves.
    if not tensors or not foreach_allowed():
        return False
    tensor, parameter, strided = _TENSOR, _PARAMETER, _STRIDED
    first = tensors[0]
    # The type first: a None leaf (no gradient) or a non-tensor also means no.
    if type(first) is not tensor and type(first) is not parameter:
        return False
    dtype = first.dtype
    if dtype not in _FLOATS:
        return False
    for t in tensors:
        kind = type(t)
        if ((kind is not tensor and kind is not parameter)
                or t.dtype is not dtype or t.layout is not strided):
            return False
    return True


def pairs_fit(lefts: Any, rights: Any) -> bool:
    """Whether ``lefts[i] + rights[i]`` may run as one multi-tensor op, checked in one pass.

    Every leaf a plain tensor, all of one dtype, each pair of one shape, and
    :func:`foreach_allowed`. torch's foreach ops do not require matching shapes (they fall back
    to per-pair ops that broadcast), so this is also the check that keeps a shape mismatch from
    passing as a silently broadcast result: where it says no, the caller runs its per-pair
    checks, which raise. The layout is not checked: off the fast route (sparse leaves), a foreach
    op runs exactly the per-pair op. The lists must have one length (from one treespec).
    """
    if not lefts or not foreach_allowed():
        return False
    tensor, parameter = _TENSOR, _PARAMETER
    dtype = lefts[0].dtype if type(lefts[0]) is tensor or type(lefts[0]) is parameter else None
    for a, b in zip(lefts, rights):
        kind_a, kind_b = type(a), type(b)
        if ((kind_a is not tensor and kind_a is not parameter)
                or (kind_b is not tensor and kind_b is not parameter)
                or a.dtype is not dtype or b.dtype is not dtype or a.shape != b.shape):
            return False
    return True


class ScalarTensors(dict):
    """0-d CPU tensors holding one number, by dtype: ``scalars[torch.float32]``, made on first use.

    On the CPU the foreach ops wrap a Python number into a new tensor once per leaf, forward and
    backward, so :func:`foreach_mul_scalar` passes a 0-d tensor instead; a transformation whose
    factor is fixed (``scale(-lr)``) keeps them here rather than building one every step; under
    ``vmap`` its per-leaf ops take them too. They are never written to and never require grad
    (autograd only saves them). One made in inference mode, inside ``grad``/``jvp`` or under a
    tensor subclass mode serves that call only and is not kept.
    """

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def __missing__(self, dtype: torch.dtype) -> torch.Tensor:
        made = torch.scalar_tensor(self.value, dtype=dtype, device="cpu")
        # Not kept: one that grad/jvp wrapped (it dies with the transform), one made in
        # inference mode (autograd could not save it later), a subclass mode's.
        if type(made) is _TENSOR and not made.is_inference() and not _is_wrapped(made):
            self[dtype] = made
        return made


def fused_op_cannot_read(*scalars: torch.Tensor) -> bool:
    """Whether a fused op cannot take these state scalars (a count...) as the Python numbers it
    reads: under torch.compile a traced value has none without a graph break, and a torch.func
    wrapper (batched by vmap, or traced by grad/jvp) holds one per batch entry. The accelerated
    transforms then run the same math unfused (which Inductor fuses under compile)."""
    return torch.compiler.is_compiling() or any(
        torch._C._functorch.is_functorch_wrapped_tensor(t) for t in scalars)


def tensor_hyperparams(*values: Any) -> bool:
    """Whether any of these hyper-parameters (or of the tuples among them) is a tensor.

    The fused ops take hyper-parameters as Python numbers and do not differentiate them, so an
    accelerated transform given a tensor (a meta-learned ``betas``, a scheduled value from
    :func:`~diffopt.inject_hyperparams`) runs its plain sibling's math instead: the same numbers
    up to rounding, and exact meta-gradients with respect to the tensor.
    """
    return any(isinstance(v, torch.Tensor) or (isinstance(v, tuple) and tensor_hyperparams(*v))
               for v in values)


def foreach_mul_scalar(leaves: list, factor: float,
                       scalars: ScalarTensors | None = None) -> list:
    """``[leaf * factor ...]`` as one foreach op, for :func:`can_use_foreach` leaves.

    On the CPU the factor goes in as a 0-d tensor (``scalars``' one for the leaves' dtype when
    given, which must hold ``factor``): given a Python number, the CPU foreach ops wrap it into a
    new tensor once per leaf, forward and backward (twice as slow on small leaves).
    """
    first = leaves[0]
    if first.is_cpu:
        scalar = (scalars[first.dtype] if scalars is not None
                  else torch.scalar_tensor(factor, dtype=first.dtype))
        return torch._foreach_mul(leaves, scalar)  # type: ignore[return-value]
    return torch._foreach_mul(leaves, factor)  # type: ignore[return-value]


def scale_leaf(leaf: torch.Tensor, factor: float,
               add_to: torch.Tensor | None = None) -> torch.Tensor:
    """``add_to + factor * leaf`` (one fused op) or ``factor * leaf``; ``leaf`` itself for 1."""
    if add_to is not None:
        return torch.add(add_to, leaf, alpha=factor)
    return leaf if factor == 1.0 else leaf * factor


def scale_leaves(leaves: list, factor: float, add_to: list | None = None,
                 scalars: ScalarTensors | None = None) -> list:
    """:func:`scale_leaf` over lists, by one multi-tensor op where :func:`can_use_foreach`.

    ``None`` leaves pass through: a ``None`` in ``leaves`` gives ``None`` (or the ``add_to``
    leaf, unchanged), a ``None`` in ``add_to`` gives ``None``; the other pairs still share one
    multi-tensor op. ``scalars``: ``factor``'s 0-d tensors, kept by the caller.
    """
    both = leaves if add_to is None else [*leaves, *add_to]
    if can_use_foreach(both):  # every leaf a tensor: the common case, with no list rebuilt
        if add_to is not None:
            # (no typing.cast: a function call on the path of every MetaSGD step)
            return (torch._foreach_add(add_to, leaves) if factor == 1.0  # type: ignore[return-value]
                    else torch._foreach_add(add_to, leaves, alpha=factor))
        return list(leaves) if factor == 1.0 else foreach_mul_scalar(leaves, factor, scalars)
    if any(leaf is None for leaf in both):
        present = [i for i, leaf in enumerate(leaves)
                   if leaf is not None and (add_to is None or add_to[i] is not None)]
        out = list(leaves if add_to is None else add_to)
        done = scale_leaves([leaves[i] for i in present], factor,
                            None if add_to is None else [add_to[i] for i in present], scalars)
        for j, i in enumerate(present):
            out[i] = done[j]
        return out
    # scale_leaf's forms, inlined: under vmap (no foreach) this loop is the step's own Python,
    # and each op goes through vmap's dispatch. There a Python number is wrapped into a new
    # tensor per op (a third of a small op's time), so a float32/float64 CPU leaf is multiplied
    # by the caller's 0-d tensor of its dtype (the same number: a float32 op rounds the factor
    # to float32 either way), and a factor of 1 adds without ``alpha``.
    if add_to is None:
        if factor == 1.0:
            return list(leaves)
        if scalars is None or _is_compiling():  # traced, the number is a graph constant
            return [leaf * factor for leaf in leaves]
        return [leaf * scalars[leaf.dtype] if leaf.is_cpu and leaf.dtype in _FLOATS
                else leaf * factor for leaf in leaves]
    if factor == 1.0:
        return [torch.add(p, leaf) for leaf, p in zip(leaves, add_to)]
    return [torch.add(p, leaf, alpha=factor) for leaf, p in zip(leaves, add_to)]


def check_leaf(name: str, index: int, update: torch.Tensor, reference: torch.Tensor) -> None:
    """Raise a clear error when an update leaf does not fit the state leaf it pairs with."""
    if not isinstance(update, torch.Tensor):
        raise TypeError(f"{name}: update leaf {index} is a {type(update).__name__}, not a tensor")
    if update.dtype != reference.dtype:
        raise TypeError(
            f"{name}: update leaf {index} has dtype {update.dtype} but the optimizer state was "
            f"built for {reference.dtype}; cast the gradients or re-initialize the optimizer"
        )
    if update.shape != reference.shape:
        raise ValueError(
            f"{name}: update leaf {index} has shape {tuple(update.shape)} but the optimizer "
            f"state was built for shape {tuple(reference.shape)}"
        )


def zeros_like_params(name: str, params: Any, *, requires_grad: bool = False,
                      fill_value: float = 0.0) -> Any:
    """A tree of ``fill_value`` shaped like ``params``, checking every leaf is a float tensor."""
    leaves, treespec = optree_core.tree_flatten(params)
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"{name}: params must be a pytree of tensors, found "
                            f"{type(leaf).__name__}")
        if not (leaf.is_floating_point() or leaf.is_complex()):
            raise TypeError(f"{name}: params must be floating point tensors, found {leaf.dtype}")
    # Factory functions record no autograd history: the new leaves start their own graphs. The
    # flag is decided once for all leaves (a MAML loop builds a state per task).
    flag = _requires_grad_flag(requires_grad)
    if fill_value == 0.0:
        out = [torch.zeros_like(leaf, requires_grad=flag) for leaf in leaves]
    else:
        out = [torch.full_like(leaf, fill_value, requires_grad=flag) for leaf in leaves]
    return optree_core.tree_unflatten(treespec, out)


def count_power(base: Any, count: torch.Tensor) -> torch.Tensor:
    """``base ** count`` from an integer step-count tensor, in float64 for a number ``base``.

    A tensor ``base`` (a meta-learned decay) keeps its dtype and autograd graph.
    """
    if isinstance(base, torch.Tensor):
        return torch.pow(base, count.to(base.dtype))
    return torch.pow(base, count.to(torch.float64))


def bias_correction(decay: Any, count: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 - decay ** count`` as a 0-d ``dtype`` tensor, rounded once (as a Python float was)."""
    return (1 - count_power(decay, count)).to(dtype)


def per_dtype(make: Callable[[torch.dtype], torch.Tensor]) -> Callable[[torch.dtype], torch.Tensor]:
    """Memoize ``make(dtype)`` for one update: scalars derived from the count, built once per dtype."""
    cache: dict[torch.dtype, torch.Tensor] = {}

    def get(dtype: torch.dtype) -> torch.Tensor:
        value = cache.get(dtype)
        if value is None:
            value = cache[dtype] = make(dtype)
        return value

    return get
