"""DTensor support of every ``torch.ops.fused_optim`` op: the fused kernel runs once on the local shards.

An element-wise op is shard-local: where the i-th tensor of every per-element list (params,
grads, the moments...) has the same mesh and placements, the kernel's arithmetic on each rank's
local shards is the arithmetic on the whole tensors. So a call with DTensors is validated
(:func:`_index_specs`), unwrapped to its local tensors and run ONCE, and a functional or backward
op's outputs are wrapped back as DTensors with the inputs' placements. Nothing is redistributed:
an in-place op could not change its arguments' placements anyway, and a silent all-gather of a
mismatched optimizer state would hide a bug, so a mismatch is an error naming the list and index.

Scalar state (torch.optim's step counters, ASGD's ``etas``/``mus``, NAdam's ``mu_products``) stays
plain 0-d tensors next to DTensor parameters, as torch.optim keeps ``state["step"]`` for them, so
checkpoints interchange; a replicated DTensor is accepted there too, as are ``grad_scale`` and
``found_inf``.

Adafactor is not element-wise: its factors and its update's RMS reduce over whole tensors. Its
ops gather each sharded DTensor argument (``redistribute`` to replicated), run the kernel once on
the whole tensors and keep each rank's shard of the results: exact, at the cost of an all-gather.

The handlers go into DTensor's table of per-op handlers (``DTensor._op_dispatcher.
_custom_op_handlers``, where torch keeps its own for ops that sharding propagation cannot express)
rather than a sharding strategy: a strategy describes one placement per argument, not per list
entry, and makes DTensor redistribute mismatched inputs instead of refusing them. They are
registered when ``torch.distributed.tensor`` is imported (importing it costs about a second, so
fused-optim never does so itself): see :func:`fused_optim.ops._register_dtensor`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch._prims_common import make_contiguous_strides_for
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor._redistribute import redistribute_local_tensor

from fused_optim import _native

# The per-parameter 0-d lists, which stay plain tensors next to DTensor parameters (torch.optim's
# state["step"] is a plain tensor for them; ASGD's eta and mu and NAdam's mu_product likewise).
SCALAR_LISTS = frozenset({"state_steps", "etas", "mus", "mu_products"})
# The tensor keyword arguments (torch.amp.GradScaler's), 1-element and read whole by every rank.
_SCALAR_KWARGS = ("grad_scale", "found_inf")
# Ops whose kernel reduces over each tensor (Adafactor's factors and RMS): gathered, see the module doc.
_GATHERED_PREFIX = "adafactor_"


@functools.cache
def _list_names(op: torch._ops.OpOverload) -> tuple[str, ...]:
    """The names of ``op``'s positional (tensor-list) arguments, in order."""
    return tuple(a.name for a in op._schema.arguments if not a.kwarg_only)


def _where(op: torch._ops.OpOverload) -> str:
    return f"fused_optim::{op._schema.name.split('::')[1]}"


def _index_specs(
    op: torch._ops.OpOverload, lists: Sequence[Sequence[Any]], same_shape: bool
) -> dict[int, tuple[str, DTensor]]:
    """Per index ``i``: the first DTensor of the per-element lists there (with its list's name),
    having checked that every other one there has its mesh and placements (and, where
    ``same_shape``, its shape), that none is a plain tensor and none is ``Partial``."""
    # Runs on every step of a drop-in class: the common case (the same mesh object, equal
    # placement tuples and sizes) costs a few comparisons per tensor.
    first: dict[int, tuple[str, DTensor]] = {}
    for name, values in zip(_list_names(op), lists):
        if name in SCALAR_LISTS:
            continue
        for i, t in enumerate(values):
            if t is None:  # an absent output gradient of a backward op
                continue
            if not isinstance(t, DTensor):
                raise TypeError(
                    f"{_where(op)}: {name}[{i}] is a plain {type(t).__name__} but the call has DTensor "
                    "arguments: every tensor of the per-element lists must be a DTensor, or none"
                )
            ref = first.get(i)
            if ref is None:
                if _has_partial(t._spec.placements):
                    raise ValueError(
                        f"{_where(op)}: {name}[{i}] has a Partial placement {t.placements}; reduce it "
                        "first (e.g. .redistribute() to Shard or Replicate): the update is not linear"
                    )
                first[i] = (name, t)
                continue
            spec, ref_spec = t._spec, ref[1]._spec
            if spec.mesh is not ref_spec.mesh and spec.mesh != ref_spec.mesh:
                raise ValueError(
                    f"{_where(op)}: {name}[{i}] is on device mesh {spec.mesh} but {ref[0]}[{i}] is on "
                    f"{ref_spec.mesh}: the i-th tensors of all lists must share a mesh"
                )
            if not same_shape:
                if _has_partial(spec.placements):
                    raise ValueError(
                        f"{_where(op)}: {name}[{i}] has a Partial placement {t.placements}; reduce "
                        "it first (e.g. .redistribute() to Shard or Replicate)"
                    )
                continue
            if spec.placements != ref_spec.placements:
                raise ValueError(
                    f"{_where(op)}: {name}[{i}] has placements {t.placements} but {ref[0]}[{i}] has "
                    f"{ref[1].placements}: the i-th tensors of all lists must be placed alike (the "
                    "update is computed on the local shards)"
                )
            if t.shape != ref[1].shape:
                raise ValueError(
                    f"{_where(op)}: {name}[{i}] has shape {tuple(t.shape)} but {ref[0]}[{i}] has "
                    f"{tuple(ref[1].shape)}"
                )
    return first


@functools.cache
def _has_partial(placements: tuple[Any, ...]) -> bool:
    return any(p.is_partial() for p in placements)


def _scalar_local(where: str, name: str, t: Any) -> Any:
    """A plain scalar tensor as it is, a replicated DTensor as its local tensor."""
    if not isinstance(t, DTensor):
        return t
    if not all(isinstance(p, Replicate) for p in t.placements):
        raise ValueError(
            f"{where}: {name} is a DTensor with placements {t.placements}; a scalar argument must be "
            "a plain tensor or a replicated DTensor"
        )
    return t._local_tensor


def _run_local(op: torch._ops.OpOverload, lists: list[list[Any]], kwargs: dict[str, Any]) -> Any:
    """The op on plain tensors: its unboxed call where it takes them (see ``fused_optim.ops``)."""
    result = _native.EAGER[op._schema.name.split("::")[1]](*lists, **kwargs)
    return _native.boxed(op)(*lists, **kwargs) if result is NotImplemented else result


def _split_args(
    op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[list[Any]], dict[str, Any]]:
    """The positional lists (a list each) and the keyword arguments of a call, bound by the schema."""
    names = _list_names(op)
    lists = [list(a) for a in args[: len(names)]]
    kwargs = dict(kwargs)
    for name in names[len(lists) :]:  # a list passed by keyword
        lists.append(list(kwargs.pop(name)))
    where = _where(op)
    for key in _SCALAR_KWARGS:
        if kwargs.get(key) is not None:
            kwargs[key] = _scalar_local(where, key, kwargs[key])
    return lists, kwargs


def _unwrap(op: torch._ops.OpOverload, lists: list[list[Any]]) -> list[list[Any]]:
    where = _where(op)
    out = []
    for name, values in zip(_list_names(op), lists):
        if name in SCALAR_LISTS:
            out.append([_scalar_local(where, f"{name}[{i}]", t) for i, t in enumerate(values)])
        else:
            out.append([t if t is None else t._local_tensor for t in values])
    return out


def _wrap(local: torch.Tensor, like: DTensor) -> DTensor:
    """``local`` as the shard of a (contiguous) DTensor placed like ``like``."""
    meta = TensorMeta(like.shape, make_contiguous_strides_for(like.shape), local.dtype)
    spec = DTensorSpec(like.device_mesh, like.placements, tensor_meta=meta)
    return DTensor(local, spec, requires_grad=False)  # type: ignore[call-arg]


def _outputs_like(op: torch._ops.OpOverload, result: Any, like: list[DTensor | None]) -> Any:
    """Wraps each output list's i-th tensor as a DTensor placed like ``like[i]``."""
    if result is None:
        return None
    return tuple(
        [t if (ref := like[i]) is None else _wrap(t, ref) for i, t in enumerate(out)]
        for out in result
    )


def elementwise_handler(
    op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """An element-wise op on DTensors: checked, run once on the local shards, outputs re-wrapped."""
    lists, kwargs = _split_args(op, args, kwargs)
    specs = _index_specs(op, lists, same_shape=True)
    result = _run_local(op, _unwrap(op, lists), kwargs)
    n = max((len(v) for v in lists), default=0)
    return _outputs_like(op, result, [specs[i][1] if i in specs else None for i in range(n)])


def _replicated(t: DTensor) -> DTensorSpec:
    return DTensorSpec(
        t.device_mesh, tuple(Replicate() for _ in t.placements), tensor_meta=t._spec.tensor_meta
    )


def gathered_handler(
    op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """An op that reduces over each tensor (Adafactor's): every sharded argument gathered, the kernel
    run once on the whole tensors, each rank keeping its shard of what was written or returned."""
    lists, kwargs = _split_args(op, args, kwargs)
    _index_specs(
        op, lists, same_shape=False
    )  # plain tensors, Partial and mixed meshes are refused alike
    names = _list_names(op)
    full = []
    for name, values in zip(names, lists):
        if name in SCALAR_LISTS:
            full.append(
                [_scalar_local(_where(op), f"{name}[{i}]", t) for i, t in enumerate(values)]
            )
        else:
            full.append(
                [
                    t
                    if t is None
                    else redistribute_local_tensor(t._local_tensor, t._spec, _replicated(t))
                    for t in values
                ]
            )
    result = _run_local(op, full, kwargs)
    if (
        op._schema.returns
    ):  # functional: each output list shaped like one input list (ops.FUNCTIONAL_OPS)
        from fused_optim.ops import FUNCTIONAL_OPS

        base = op._schema.name.split("::")[1]
        backward = base.endswith("_backward")
        spec = FUNCTIONAL_OPS[base.removesuffix("_backward")]
        n_grads = len(spec.outputs) if backward else 0
        inputs = lists[
            n_grads:
        ]  # the forward inputs (a backward op takes all of them here: spec.like)
        like = range(len(spec.inputs)) if backward else spec.like or range(len(spec.outputs))
        return tuple(
            [_shard(t, src) for t, src in zip(out, inputs[k])] for out, k in zip(result, like)
        )
    for name, values, gathered in zip(names, lists, full):  # in place: keep this rank's shard
        if name in SCALAR_LISTS:
            continue
        for t, whole in zip(values, gathered):
            if t is not None and whole is not t._local_tensor:
                t._local_tensor.copy_(redistribute_local_tensor(whole, _replicated(t), t._spec))
    return None


def _shard(whole: torch.Tensor, like: DTensor) -> DTensor:
    """This rank's shard of ``whole`` (a replicated result) as a DTensor placed like ``like``."""
    local = redistribute_local_tensor(whole, _replicated(like), like._spec)
    return _wrap(local.contiguous(), like)


def register() -> None:
    """Puts a handler for every fused_optim op into DTensor's dispatcher (idempotent)."""
    table: dict[Any, Any] = (
        DTensor._op_dispatcher._custom_op_handlers
    )  # (AttributeError: see the caller)
    for name in _native.EAGER:
        if name.startswith("_"):
            continue
        handler = gathered_handler if name.startswith(_GATHERED_PREFIX) else elementwise_handler
        table[getattr(torch.ops.fused_optim, name).default] = handler
