"""Python glue for the ``torch.ops.fused_optim`` custom ops.

Each algorithm's schemas live in its ``csrc/ops/<algo>.cpp``. This module

* loads the compiled library (``fused_optim._C``),
* registers a fake (meta) kernel for every op, so they trace under ``torch.compile``,
* registers a vmap rule for the functional ops and their backward ops (element-wise: the batch
  is only more elements, one kernel call serves it; Adafactor's, which reduces per tensor, makes
  one call per batch entry),
* builds the named :class:`torch.autograd.Function` nodes (``FusedAdam``...) that
  :mod:`fused_optim.functional` applies, so a graph shows one ``FusedAdamBackward`` node per
  update instead of dozens of element-wise nodes; their backward is the matching ``*_backward``
  op (one fused pass), and they run under ``torch.func`` transforms and ``torch.compile``,
* makes the same node the autograd of the raw functional ops (``*_update``, ``adam_direction``),
  and tells graph tools what such a node computes (:func:`describe_node`), and
* makes every op take DTensors once ``torch.distributed.tensor`` is imported: the kernel runs
  once on the local shards (:mod:`fused_optim._dtensor`).

Eager callers (the drop-in ``step()``, :func:`apply_functional`, the nodes' forward and backward)
take each op's unboxed call (``fused_optim._native.EAGER``, csrc/eager_call.h) where the dispatcher
would only reach the kernel, and ``torch.ops`` everywhere else (see :func:`_eager_or_boxed`).

The in-place ``*_step_`` ops mutate their arguments and therefore get no autograd (torch forbids
it); the drop-in optimizers call them under ``torch.no_grad()``.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import math
import operator
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from fused_optim import _native

__all__ = [
    "FUNCTIONAL_OPS",
    "STEP_OPS",
    "FunctionalOpSpec",
    "NodeInfo",
    "adadelta_step_",
    "adafactor_step_",
    "adagrad_step_",
    "adam_step_",
    "adamax_step_",
    "adan_step_",
    "apply_functional",
    "asgd_step_",
    "describe_node",
    "lion_step_",
    "muon_apply_",
    "muon_direction_",
    "muon_lr_scale",
    "muon_step_",
    "nadam_step_",
    "newton_schulz",
    "node_class",
    "radam_step_",
    "rmsprop_step_",
    "rprop_step_",
    "sgd_step_",
    "shape_batches",
    "tensor_list",
    "validate_only",
]

_lib = torch.ops.fused_optim


def _eager_or_boxed(name: str, *, below_autograd: bool = False) -> Callable[..., Any]:
    """``torch.ops.fused_optim.<name>`` for eager callers, taking the op's unboxed call when it may.

    The unboxed call (``fused_optim._native.EAGER[name]``, csrc/eager_call.h) converts the Python
    arguments straight to the C++ implementation's types, skipping the boxed ``torch.ops`` path
    that costs more than a small tensor's update; it answers ``NotImplemented`` whenever a layer
    above the kernel has something to do (autograd, a mode or transform, a subclass, a profiler,
    arguments of another type), and the op then goes through ``torch.ops`` as before. Under
    ``torch.compile`` the op itself is called, so that it lands in the graph.

    ``below_autograd``: for a caller that knows no input needs a gradient (a functional op's eager
    runner outside the transforms): ``torch.ops`` is entered below autograd, skipping the op's own
    Python autograd kernel, which would only hand every list back to the dispatcher (25 us of a
    45 us call on one tensor, on the stable path).
    """
    op = getattr(_lib, name).default
    eager, boxed = _native.EAGER[name], _native.boxed(op)
    dispatch_below_autograd = torch._C._AutoDispatchBelowAutograd

    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():  # the op itself, for the graph
            return op(*args, **kwargs)
        result = eager(*args, **kwargs)
        if result is not NotImplemented:
            return result
        if below_autograd:
            with dispatch_below_autograd():
                return boxed(*args, **kwargs)
        return boxed(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


# Every op of every csrc/ops/<algo>.cpp, by name: what this package's eager callers run.
_eager: Any = type("_EagerOps", (), {name: staticmethod(_eager_or_boxed(name)) for name in _native.EAGER})

# The in-place ops' optional keyword arguments of torch.amp.GradScaler's protocol, as torch's fused
# optimizers take them: each a one-element float32 tensor on the params' device. Where
# ``found_inf`` is non-zero the op writes nothing (step counters included); otherwise the
# gradients are multiplied by ``1 / grad_scale`` as the kernel reads them, and left so (unscaled in
# place, as torch's fused optimizers leave them). Both are read on the device: on CUDA only an op
# that also updates host-side state (step counters, ASGD's and NAdam's scalars) reads
# ``found_inf`` on the host, which waits for the device.
_AMP_ARGS = ("grad_scale", "found_inf")

# The in-place ops with step counters also take ``capturable`` (default False), as torch.optim's
# option of that name: the kernel then reads each counter where it lives (it must be on the params'
# device), computes the step's bias corrections from it per block and advances it after the update,
# so the op reads nothing on the host (``found_inf`` included) and a CUDA graph may capture it; each
# replay advances the counters. Without it the op increments the counters on the host (torch.optim
# keeps them on the CPU) and computes the bias corrections there, once per distinct count.

STEP_OPS = (
    "sgd_step_",
    "adam_step_",
    "rmsprop_step_",
    "adagrad_step_",
    "adadelta_step_",
    "adamax_step_",
    "radam_step_",
    "lion_step_",
    "adan_step_",
    "nadam_step_",
    "rprop_step_",
    "asgd_step_",
    "adafactor_step_",
)


@dataclass(frozen=True)
class FunctionalOpSpec:
    """How one functional op and its backward op fit together.

    Attributes:
        name: the op (``torch.ops.fused_optim.<name>``); its backward is ``<name>_backward``.
        inputs: names of the op's positional tensor-list arguments.
        saved: indices of the ``inputs`` that the backward op takes after the output gradients.
        outputs: for each output list, whether it is present for the given keyword arguments
            (an absent output is an empty list).
        grad_outputs: the same for the backward op's outputs (one per forward input).
        node: name of the autograd node class, shown as ``<node>Backward``.
        like: for an op whose state is shaped unlike the params (Adafactor's row/column averages),
            the input each output list is shaped like (each backward output is shaped like its
            forward input; the backward must then take every input); ``None``: all like the first.
        elementwise: whether the op is element-wise (a vmap batch is only more elements); an op
            that reduces over each tensor (Adafactor's RMS) runs once per batch entry instead.

    >>> spec = FUNCTIONAL_OPS['adam_update']
    >>> spec.inputs[:2], spec.node, spec.backward_op.name()
    (('params', 'grads'), 'FusedAdam', 'fused_optim::adam_update_backward')
    """

    name: str
    inputs: tuple[str, ...]
    saved: tuple[int, ...]
    outputs: tuple[Callable[[dict[str, Any]], bool], ...]
    grad_outputs: tuple[Callable[[dict[str, Any]], bool], ...]
    node: str
    like: tuple[int, ...] | None = None
    elementwise: bool = True

    @property
    def op(self) -> torch._ops.OpOverload:
        return getattr(_lib, self.name).default

    @property
    def backward_op(self) -> torch._ops.OpOverload:
        return getattr(_lib, self.name + "_backward").default


def _always(_kwargs: dict[str, Any]) -> bool:
    return True


def _amsgrad(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs["amsgrad"])


def _centered(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs["centered"])


def _sgd_has_buffers(kwargs: dict[str, Any]) -> bool:
    return kwargs["momentum"] != 0


def _sgd_buffers_are_inputs(kwargs: dict[str, Any]) -> bool:
    return kwargs["momentum"] != 0 and not kwargs["first_step"]


def _rmsprop_has_buffers(kwargs: dict[str, Any]) -> bool:
    return kwargs["momentum"] > 0


def _factored(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs["factored"])


def _not_factored(kwargs: dict[str, Any]) -> bool:
    return not kwargs["factored"]


_A = _always
FUNCTIONAL_OPS: dict[str, FunctionalOpSpec] = {
    spec.name: spec
    for spec in (
        FunctionalOpSpec("sgd_update", ("params", "grads", "momentum_buffers"), (0,),
                         (_A, _sgd_has_buffers), (_A, _A, _sgd_buffers_are_inputs), "FusedSGD"),
        FunctionalOpSpec("adam_update", ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"),
                         (0, 1, 2, 3, 4), (_A, _A, _A, _amsgrad), (_A, _A, _A, _A, _amsgrad), "FusedAdam"),
        FunctionalOpSpec("adam_direction", ("grads", "exp_avgs", "exp_avg_sqs"), (0, 1, 2),
                         (_A, _A, _A), (_A, _A, _A), "FusedAdamDirection"),
        FunctionalOpSpec("rmsprop_update", ("params", "grads", "square_avgs", "grad_avgs", "momentum_buffers"),
                         (0, 1, 2, 3), (_A, _A, _centered, _rmsprop_has_buffers),
                         (_A, _A, _A, _centered, _rmsprop_has_buffers), "FusedRMSprop"),
        FunctionalOpSpec("adagrad_update", ("params", "grads", "state_sums"), (0, 1, 2),
                         (_A, _A), (_A, _A, _A), "FusedAdagrad"),
        FunctionalOpSpec("adadelta_update", ("params", "grads", "square_avgs", "acc_deltas"), (0, 1, 2, 3),
                         (_A, _A, _A), (_A, _A, _A, _A), "FusedAdadelta"),
        FunctionalOpSpec("adamax_update", ("params", "grads", "exp_avgs", "exp_infs"), (0, 1, 2, 3),
                         (_A, _A, _A), (_A, _A, _A, _A), "FusedAdamax"),
        FunctionalOpSpec("radam_update", ("params", "grads", "exp_avgs", "exp_avg_sqs"), (0, 1, 2, 3),
                         (_A, _A, _A), (_A, _A, _A, _A), "FusedRAdam"),
        FunctionalOpSpec("lion_update", ("params", "grads", "exp_avgs"), (0,), (_A, _A), (_A, _A, _A), "FusedLion"),
        FunctionalOpSpec("muon_direction", ("grads", "momentum_buffers"), (0,), (_A, _A), (_A, _A),
                         "FusedMuonDirection"),
        FunctionalOpSpec("adan_update", ("params", "grads", "exp_avgs", "exp_avg_diffs", "exp_avg_sqs", "prev_grads"),
                         (0, 1, 2, 3, 4, 5), (_A, _A, _A, _A, _A), (_A, _A, _A, _A, _A, _A), "FusedAdan"),
        FunctionalOpSpec("nadam_update", ("params", "grads", "exp_avgs", "exp_avg_sqs"), (0, 1, 2, 3),
                         (_A, _A, _A), (_A, _A, _A, _A), "FusedNAdam"),
        FunctionalOpSpec("rprop_update", ("params", "grads", "prevs", "step_sizes"), (1, 2, 3),
                         (_A, _A, _A), (_A, _A, _A, _A), "FusedRprop"),
        FunctionalOpSpec("asgd_update", ("params", "grads", "axs"), (0,), (_A, _A), (_A, _A, _A), "FusedASGD"),
        FunctionalOpSpec("adafactor_update", ("params", "grads", "row_vars", "col_vars", "variances"), (0, 1, 2, 3, 4),
                         (_A, _factored, _factored, _not_factored), (_A, _A, _factored, _factored, _not_factored),
                         "FusedAdafactor", like=(0, 2, 3, 4), elementwise=False),
    )
}


# --- fake kernels --------------------------------------------------------------------------------

def _like(reference: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    # The real kernels return contiguous tensors shaped like the reference list.
    return [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in reference]


def _check_devices(name: str, args: Sequence[Any], reference: int) -> None:
    """The device check of the compiled kernels, for the fakes.

    A call mixing meta tensors with real ones dispatches to the fake, which must reject it as the
    kernels reject mixed devices, rather than do nothing (a step) or return uninitialized memory
    (a functional op). Step counters may stay on the CPU, as torch.optim keeps them.
    """
    arguments = getattr(_lib, name).default._schema.arguments
    lists = [(a.name, v) for a, v in zip(arguments, args) if isinstance(v, (list, tuple))]
    if not lists[reference][1]:
        return
    ref_name, ref = lists[reference]
    device = next((t.device for t in ref if t is not None), None)
    for list_name, values in lists:
        for i, t in enumerate(values):
            if t is None or t.device == device or (list_name == "state_steps" and t.device.type == "cpu"):
                continue
            raise ValueError(f"fused_optim::{name}: {list_name}[{i}] is on {t.device} but {ref_name} are on "
                             f"{device}")


def _register_step_fake(name: str) -> None:
    @torch.library.register_fake(f"fused_optim::{name}")
    def _fake(*args: Any, **kwargs: Any) -> None:
        _check_devices(name, args, 0)
        device = next((p.device for p in args[0]), None)
        for key in _AMP_ARGS:  # one device, as the kernels check
            t = kwargs.get(key)
            if t is not None and device is not None and t.device != device:
                raise ValueError(f"fused_optim::{name}: {key} is on {t.device} but params are on {device}")
        return None


def _register_functional_fakes(spec: FunctionalOpSpec) -> None:
    like = spec.like or (0,) * len(spec.outputs)

    @torch.library.register_fake(f"fused_optim::{spec.name}")
    def _fake_forward(*args: Any, **kwargs: Any) -> tuple[list[torch.Tensor], ...]:
        _check_devices(spec.name, args, 0)
        return tuple(_like(args[i]) if present(kwargs) else [] for i, present in zip(like, spec.outputs))

    @torch.library.register_fake(f"fused_optim::{spec.name}_backward")
    def _fake_backward(*args: Any, **kwargs: Any) -> tuple[list[torch.Tensor], ...]:
        _check_devices(spec.name + "_backward", args, len(spec.outputs))
        # Each gradient like its input (``like``), or all like the first saved input: params (or grads).
        saved = args[len(spec.outputs):]
        return tuple((_like(saved[i] if spec.like else saved[0]) if present(kwargs) else [])
                     for i, present in enumerate(spec.grad_outputs))


# Muon's in-place passes (its step, :func:`muon_step_`, is a Python sequence of them).
for _name in (*STEP_OPS, "muon_direction_", "muon_apply_"):
    _register_step_fake(_name)


# --- vmap --------------------------------------------------------------------------------------------

def _vmap_elementwise(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A vmap rule for an element-wise op over parallel tensor lists.

    Every functional op and its backward treat the ``i``-th tensor of each list as one parameter's
    values, element by element. A batch dimension is therefore only more elements: the rule moves
    it to the front, expands the unbatched tensors of a parameter whose other tensors are batched
    (a view, no copy), and makes one kernel call for the whole batch. A parameter none of whose
    tensors is batched stays unbatched, as a per-sample loop would leave it.
    """

    def rule(info, in_dims, *args, **kwargs):  # type: ignore[no-untyped-def]
        batched = {i for dims in in_dims for i, d in enumerate(dims) if d is not None}

        def to_front(t: torch.Tensor | None, d: int | None, i: int) -> torch.Tensor | None:
            if t is None or i not in batched:
                return t
            return t.movedim(d, 0) if d is not None else t.expand(info.batch_size, *t.shape)

        lists = [[to_front(t, d, i) for i, (t, d) in enumerate(zip(values, dims))]
                 for values, dims in zip(args, in_dims)]
        outputs = op(*lists, **kwargs)
        return outputs, tuple([0 if i in batched else None for i in range(len(out))] for out in outputs)

    return rule


def _vmap_per_sample(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """A vmap rule for an op that reduces over each tensor (Adafactor's RMS of each parameter).

    The batch is not just more elements there: each batch entry is one call on its own slices,
    whose results are stacked. As in :func:`_vmap_elementwise`, a parameter none of whose tensors
    is batched is updated once, unbatched.
    """
    num_outputs = len(op._schema.returns)

    def rule(info, in_dims, *args, **kwargs):  # type: ignore[no-untyped-def]
        n = max(len(values) for values in args)
        batched = sorted({i for dims in in_dims for i, d in enumerate(dims) if d is not None})
        plain = sorted(set(range(n)) - set(batched))

        def call(indices: list[int], entry: int | None) -> tuple[list[torch.Tensor], ...]:
            def take(t: torch.Tensor | None, d: int | None) -> torch.Tensor | None:
                return t if t is None or entry is None or d is None else t.select(d, entry)

            lists = [[take(values[i], dims[i]) for i in indices] if values else []
                     for values, dims in zip(args, in_dims)]
            return tuple(list(out) for out in op(*lists, **kwargs))

        outputs = [[None] * n for _ in range(num_outputs)]
        present = [False] * num_outputs
        if plain:
            for k, out in enumerate(call(plain, None)):
                present[k] = bool(out)
                for j, i in enumerate(plain):
                    if out:
                        outputs[k][i] = out[j]
        if batched:
            entries = [call(batched, b) for b in range(info.batch_size)]
            for k in range(num_outputs):
                present[k] = bool(entries[0][k])
                for j, i in enumerate(batched):
                    if present[k]:
                        outputs[k][i] = torch.stack([entry[k][j] for entry in entries])
        results = tuple(outputs[k] if present[k] else [] for k in range(num_outputs))
        return results, tuple([0 if i in batched else None for i in range(len(out))] for out in results)

    return rule


# --- autograd --------------------------------------------------------------------------------------

_DOUBLE_BACKWARD = (
    "fused_optim: the backward of {op} is not itself differentiable (second-order gradients through a "
    "fused update are not supported); use the pure-PyTorch update for higher-order meta-gradients"
)


class _NotTwiceDifferentiable(torch.autograd.Function):
    """Passes the fused backward's results through; differentiating them raises ``message``.

    A ``torch.autograd.Function`` rather than torch's C++ ``DelayedError`` node so that it also
    works inside ``torch.func`` transforms (whose ``grad`` always builds the backward's graph).
    The outputs are detached aliases, not views, so callers may still modify them in place.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(message: str, n: int, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return tuple(t.detach() for t in tensors[:n])

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
        ctx.message = inputs[0]

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[no-untyped-def]
        raise RuntimeError(ctx.message)


def _guard_second_order(op_name: str, results: Sequence[Sequence[torch.Tensor]],
                        inputs: Sequence[torch.Tensor | None]) -> list[list[torch.Tensor]]:
    """Makes any attempt to differentiate the backward's results raise a clear error.

    With ``create_graph=True`` autograd would otherwise treat the fused backward's outputs as
    constants and silently drop the second-order terms through this node.
    """
    out = [list(r) for r in results]
    if not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in inputs):
        return out
    flat = [t for r in out for t in r]
    if not flat:
        return out
    # The guard takes the differentiable inputs as extra inputs so that it lies on every path
    # autograd walks back to them (a node fed only by constants would be pruned away).
    linked = [t for t in inputs if t is not None and t.requires_grad]
    wrapped = _NotTwiceDifferentiable.apply(_DOUBLE_BACKWARD.format(op=op_name), len(flat), *flat, *linked)
    return [list(wrapped[s]) for s in _slices(tuple(map(len, out)))]


def _register_functional_autograd(spec: FunctionalOpSpec) -> None:
    """Autograd for calls of the raw op ``torch.ops.fused_optim.<name>``: its named node.

    Registered directly as the op's ``Autograd`` kernel, so one node class serves both the raw op
    and :func:`apply_functional`. Under a ``torch.func`` gradient transform the dispatcher reaches
    this kernel below the transform's own layer, where no ``autograd.Function`` can be entered
    (torch's ``register_autograd`` fails there too, less clearly); the functional API, which
    applies the node before dispatch, is the way in, and the error says so.
    """
    node = _NODES[spec.node]

    def autograd_kernel(keyset, *lists, **kwargs):  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for x in lists for t in x):
            if torch._C._are_functorch_transforms_active():
                raise RuntimeError(
                    f"fused_optim::{spec.name} was called directly, with inputs that need a gradient, inside "
                    f"a torch.func transform; call it through fused_optim.functional (or fused_optim.ops.apply_functional("
                    f"{spec.name!r}, ...)), whose autograd node supports torch.func")
            return _apply_node(node, spec, [list(x) for x in lists], kwargs)
        with torch._C._AutoDispatchBelowAutograd():
            return spec.op.redispatch(keyset & torch._C._after_autograd_keyset, *lists, **kwargs)

    _IMPL.impl(spec.name, autograd_kernel, "Autograd", with_keyset=True)


def _output_sizes(outputs: tuple[Callable[[dict[str, Any]], bool], ...], kwargs: dict[str, Any],
                  n: int) -> tuple[int, ...]:
    """Lengths of an op's output lists (``FunctionalOpSpec.outputs``) for ``n`` tensors per input list."""
    return tuple([n if present(kwargs) else 0 for present in outputs])


def _make_slices(sizes: tuple[int, ...]) -> tuple[slice, ...]:
    starts = (0, *itertools.accumulate(sizes))
    return tuple(map(slice, starts, starts[1:]))


# The slices cutting a flat argument tuple into lists of the given lengths, by lengths: a call
# structure repeats from step to step, so the node's methods look them up instead of rebuilding
# lists tensor by tensor (the cost that matters when the tensors are small).
_SLICES: dict[tuple[int, ...], tuple[slice, ...]] = {}


def _slices(sizes: tuple[int, ...]) -> tuple[slice, ...]:
    if torch.compiler.is_compiling():  # Dynamo folds the arithmetic; a cache would only add guards
        return _make_slices(sizes)
    slices = _SLICES.get(sizes)
    if slices is None:
        if len(_SLICES) >= 4096:  # many distinct structures: start over rather than grow unbounded
            _SLICES.clear()
        slices = _SLICES[sizes] = _make_slices(sizes)
    return slices


class _Plan:
    """How the eager runner (:func:`_make_runner`) lays one call structure out for a node.

    A call structure (the lengths of the op's input lists, and which output lists are present)
    repeats from step to step, so what the node's methods need to cut the flat argument and
    result tuples back into lists is computed once per structure and passed to the node in place
    of the ``layout`` tuple of the general path; the node's methods tell the two apart by type.
    Only the eager runner passes a plan (never under a transform or ``torch.compile``), so a plan
    also tells the methods that the tensors may take the unboxed call.

    Attributes:
        sizes: the lengths of the input lists.
        output_sizes: the lengths of the output lists.
        saved: the slice of ``forward``'s arguments (hyper-parameters and plan first) to save.
        saved_sizes: the lengths of the saved lists, which the backward op takes.
    """

    __slots__ = ("output_sizes", "saved", "saved_sizes", "sizes")

    def __init__(self, sizes: tuple[int, ...], output_sizes: tuple[int, ...], saved: tuple[int, int]) -> None:
        self.sizes, self.output_sizes = sizes, output_sizes
        first, end = saved
        # + 2: forward's own arguments start with the hyper-parameters and the plan
        self.saved = slice(2 + sum(sizes[:first]), 2 + sum(sizes[:end]))
        self.saved_sizes = sizes[first:end]


def _make_node(spec: FunctionalOpSpec, node_name: str) -> type[torch.autograd.Function]:
    """An autograd.Function named ``node_name`` running ``spec``'s op and its fused backward.

    It is written in the ``setup_context`` style with ``generate_vmap_rule``, so ``torch.func``
    transforms (``grad``, ``vmap``, ``jacrev``...) and ``torch.compile`` see through it: under
    ``vmap`` the forward and the backward simply call the ops, whose own vmap rules (registered
    below) run one kernel over the whole batch.

    The methods take the op's tensor lists flattened into one argument tuple, after the
    hyper-parameters and the layout of the lists. Two callers apply it:

    * the general path (:func:`_apply_node`: ``torch.compile``, ``torch.func`` transforms, the
      raw op's autograd kernel) passes the keyword arguments as a dict and the layout as the
      lengths of the input and output lists, which the methods cut by :func:`_slices`;
    * the eager runner (:func:`_make_runner`) passes the hyper-parameters as a tuple in schema
      order and a :class:`_Plan`; the methods then call the unboxed ops positionally.

    On small tensors this glue, not the kernel, is the node's cost (benchmarks/RESULTS.md,
    issue 15): hence the plan, the lists cut and joined in C++ (``_native.split_flat``,
    ``_native.flatten_lists``) instead of Python loops, and no work that the unboxed call does itself.
    """

    # The node's methods close over plain values only (ops, tuples, functions): Dynamo traces them
    # when a compiled function applies the node, and it cannot wrap a FunctionalOpSpec.
    op, backward_op, name = spec.op, spec.backward_op, spec.name
    eager_op, eager_backward_op = _native.EAGER[name], _native.EAGER[name + "_backward"]
    boxed_op, boxed_backward_op = _native.boxed(op), _native.boxed(backward_op)
    hyper_names = _hyper_names(op)
    if _hyper_names(backward_op) != hyper_names:
        raise AssertionError(f"{name}: the backward op's keyword arguments differ from the op's")
    # The saved inputs are consecutive lists (checked below): one slice of the flat inputs.
    first_saved, end_saved = spec.saved[0], spec.saved[-1] + 1
    if spec.saved != tuple(range(first_saved, end_saved)):
        raise AssertionError(f"{name}: the saved inputs {spec.saved} are not consecutive")
    # A comprehension, not itertools.chain.from_iterable: Dynamo (torch 2.14) no longer traces that
    # builtin inside an autograd.Function and breaks the graph (fullgraph compiles fail).
    def chain(lists):  # type: ignore[no-untyped-def]
        return [t for ts in lists for t in ts]
    below_autograd = torch._C._AutoDispatchBelowAutograd
    transforms_active = torch._C._are_functorch_transforms_active
    is_grad_enabled = torch.is_grad_enabled
    split_flat = _native.split_flat

    def forward(hyper, layout, *flat):  # type: ignore[no-untyped-def]
        if type(layout) is _Plan:  # the eager runner's: the unboxed call, positionally
            lists = split_flat(flat, layout.sizes)
            results = eager_op(*lists, *hyper)
            if results is NotImplemented:  # a layer above the kernel has work (a profiler...)
                with below_autograd():
                    results = boxed_op(*lists, **dict(zip(hyper_names, hyper)))
            return _flat(results)
        lists = [flat[s] for s in _slices(layout[0])]
        if transforms_active() or torch.compiler.is_compiling():
            # The transforms (and Dynamo) must see the op itself, with its vmap rule and fake.
            return tuple(chain(op(*lists, **hyper)))
        # Eager: straight to the CPU/CUDA kernel, skipping the op's own (Python) autograd kernel,
        # which would only redispatch (this node is the call's autograd): the unboxed call where
        # it may (grad mode is off in here), else torch.ops below autograd.
        results = eager_op(*lists, **hyper)
        if results is NotImplemented:
            with below_autograd():
                results = boxed_op(*lists, **hyper)
        return tuple(chain(results))

    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
        ctx.hyper = inputs[0]
        ctx.layout = layout = inputs[1]
        if type(layout) is _Plan:
            ctx.save_for_backward(*inputs[layout.saved])
        else:
            slices = _slices(layout[0])
            ctx.save_for_backward(*inputs[2 + slices[first_saved].start:2 + slices[end_saved - 1].stop])
        ctx.set_materialize_grads(False)

    def backward(ctx, *grads):  # type: ignore[no-untyped-def]
        saved_flat = ctx.saved_tensors
        hyper, layout = ctx.hyper, ctx.layout
        # The unboxed call runs only where no gradient of this backward is wanted (it checks grad
        # mode itself); torch.ops below it, without recording, for the rest (create_graph=True).
        if type(layout) is _Plan:
            saved = split_flat(saved_flat, layout.saved_sizes)
            grad_lists = split_flat(grads, layout.output_sizes)
            sizes = layout.sizes
            results = NotImplemented if torch.compiler.is_compiling() else eager_backward_op(
                *grad_lists, *saved, *hyper)
            if results is NotImplemented:
                hyper = dict(zip(hyper_names, hyper))
        else:
            sizes, output_sizes = layout
            saved = [saved_flat[s] for s in _slices(sizes[first_saved:end_saved])]
            grad_lists = [grads[s] for s in _slices(output_sizes)]
            results = NotImplemented if torch.compiler.is_compiling() else eager_backward_op(
                *grad_lists, *saved, **hyper)
        if results is NotImplemented:
            if torch.compiler.is_compiling() or transforms_active():
                with torch.no_grad():  # (the op itself for Dynamo; the transforms' layers see the call)
                    results = (backward_op if torch.compiler.is_compiling() else boxed_backward_op)(
                        *grad_lists, *saved, **hyper)
            else:
                # Below autograd, as the forward's torch.ops call: the backward op has no autograd
                # kernel, and torch's fallback for it would only look at its inputs and redispatch
                # (~2 of a one-tensor call's ~15 us; its results are guarded below either way).
                with below_autograd():
                    results = boxed_backward_op(*grad_lists, *saved, **hyper)
        if is_grad_enabled():
            results = _guard_second_order(node_name, results, [*saved_flat, *grads])
        if tuple(map(len, results)) != sizes:  # an absent state's gradient: nothing to return
            raise AssertionError(f"{name}_backward returned lists of sizes {tuple(map(len, results))}, "
                                 f"expected {sizes}")
        # (Dynamo, tracing the general path, cannot see into the C++ flattening.)
        return (None, None, *(_flat(results) if type(layout) is _Plan else chain(results)))

    doc = (f"Fused {spec.name} with a hand-written one-pass backward "
           f"(``torch.ops.fused_optim.{spec.name}_backward``).")
    node = type(node_name, (torch.autograd.Function,),
                {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
                 "backward": staticmethod(backward), "generate_vmap_rule": True, "__doc__": doc})
    _NODE_INFO[node] = NodeInfo(node_name, node_name.removeprefix("Fused").removesuffix("Direction"), spec.name,
                                spec.name.rsplit("_", 1)[1])

    def kwargs(ctx) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        """The op's hyper-parameters by name, whichever path applied the node (graph tools show them)."""
        hyper = ctx.hyper
        return dict(hyper) if isinstance(hyper, dict) else dict(zip(hyper_names, hyper))

    node._backward_cls.kwargs = property(kwargs)  # type: ignore[attr-defined]
    return node


def _flat(lists: Sequence[Sequence[torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    """The tensors of ``lists`` in one tuple: by the C++ pass where they are plain tensors."""
    flattened = _native.flatten_lists(lists)
    return tuple(itertools.chain.from_iterable(lists)) if flattened is None else flattened[0]


def _hyper_names(op: torch._ops.OpOverload) -> tuple[str, ...]:
    """The names of an op's keyword-only arguments (its hyper-parameters), in schema order."""
    return tuple(a.name for a in op._schema.arguments if a.kwarg_only)


def _apply_node(node_cls: type[torch.autograd.Function], spec: FunctionalOpSpec, lists: list[list[torch.Tensor]],
                kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], ...]:
    """``spec``'s op on ``lists`` through the autograd node ``node_cls``: the general path.

    Under ``torch.compile`` and the ``torch.func`` transforms, and for the raw op's autograd
    kernel; eager calls of :func:`apply_functional` take :func:`_make_runner`'s path.
    """
    sizes = tuple(map(len, lists))
    # The lengths of the input lists and of the output lists, which the node's methods cut by.
    layout = (sizes, _output_sizes(spec.outputs, kwargs, sizes[0]))
    flat = list(itertools.chain.from_iterable(lists))
    if torch.compiler.is_compiling():
        # Dynamo cannot trace a Function applied to one tensor in two argument slots (amsgrad's
        # maxima given as the second moments, say). Each argument goes in as a view of itself: the
        # same value to autograd, whose gradients add up on the tensor as before, and free in the
        # compiled graph. (Finding the repeats by id() instead made Dynamo guard on every input's
        # identity: fresh tensors each step meant a new graph each step.)
        out_flat = node_cls.apply(kwargs, layout, *[t.view_as(t) for t in flat])
    elif torch._C._are_functorch_transforms_active():
        out_flat = node_cls.apply(kwargs, layout, *flat)
    else:
        # Function.apply's work outside the transforms without its per-call binding of default
        # arguments (forward has none): tensors escaping a transform unwrapped, the C++ apply.
        out_flat = super(torch.autograd.Function, node_cls).apply(  # type: ignore[misc]
            kwargs, layout, *map(_unwrap_if_dead, flat))
    return tuple([list(out_flat[s]) for s in _slices(layout[1])])


_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def tensor_list(name: str, value: Any) -> list[torch.Tensor]:
    """``value`` as a list of tensors, or a TypeError that names the argument ``name``.

    The check of every tensor-list argument of the functional API: :mod:`fused_optim.functional`
    calls it on its optional lists, and :func:`apply_functional` on the op's lists wherever its
    C++ pass (``_native.flatten_lists``) did not find lists of plain tensors.

    Args:
        name: the argument's name, for the error message.
        value: a list or tuple of tensors (a list is returned as it is, a tuple as a new list).

    Returns:
        The tensors as a list.

    >>> tensor_list("grads", (torch.zeros(1),))
    [tensor([0.])]
    """
    if type(value) is list:  # the common case, by a plain loop (cheaper than a generator)
        for t in value:
            if not isinstance(t, torch.Tensor):
                break
        else:
            return value
    if isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a list of tensors, got a single tensor; wrap it in a list")
    if not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of tensors, got {type(value).__name__}")
    for i, t in enumerate(value):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}[{i}] must be a tensor, got {type(t).__name__}")
    return list(value)


def _make_runner(op_name: str, node: str | None) -> Callable[[Sequence[Sequence[torch.Tensor]], dict[str, Any]],
                                                                  tuple[list[torch.Tensor], ...]]:
    """:func:`apply_functional` for one op and node: its eager path, with the general one behind it.

    Eager calls are what a meta-learning loop makes step after step, usually with small tensors,
    where the call's Python costs more than the kernel (benchmarks/RESULTS.md, issue 15). The
    runner therefore does per call only what depends on the call: one C++ pass over the lists
    (``_native.flatten_lists``: the type test, the lengths, the gradient test, the flat arguments), one
    lookup of the call structure's :class:`_Plan`, the hyper-parameters picked in schema order
    (the unboxed call takes them positionally) and the C++ ``apply`` of the node (what
    ``Function.apply`` does outside the transforms, without its per-call argument binding).
    Anything else (torch.compile, a transform, other sequences or tensor types) takes the general
    path, as before.
    """
    spec = FUNCTIONAL_OPS[op_name]
    node_cls = _NODES[node or spec.node]
    if _NODE_INFO[node_cls].op != op_name:
        raise ValueError(f"node {node!r} does not run {op_name!r}")
    eager_apply = super(torch.autograd.Function, node_cls).apply  # type: ignore[misc]
    eager_call = getattr(_eager, op_name)
    eager_call_without_autograd = _eager_or_boxed(op_name, below_autograd=True)  # (for calls without gradients)
    hyper_names = _hyper_names(spec.op)
    # (itemgetter of one name would give the value itself, not a 1-tuple)
    pick_hyper = operator.itemgetter(*hyper_names) if len(hyper_names) > 1 else (
        lambda kwargs: (kwargs[hyper_names[0]],))
    num_hyper = len(hyper_names)
    outputs, input_names, num_lists = spec.outputs, spec.inputs, len(spec.inputs)
    constant_outputs = all(present is _always for present in outputs)
    saved = (spec.saved[0], spec.saved[-1] + 1)
    plans: dict[Any, _Plan] = {}
    transforms_active = torch._C._are_functorch_transforms_active
    flatten_lists, split_flat = _native.flatten_lists, _native.split_flat

    def general(lists: Sequence[Sequence[torch.Tensor]], kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], ...]:
        """Under torch.compile, with other sequences or tensors, or a mistake in ``kwargs``."""
        if isinstance(lists, torch.Tensor) or not isinstance(lists, Sequence) or len(lists) != num_lists:
            raise TypeError(f"{op_name} takes {num_lists} lists of tensors ({', '.join(input_names)}), "
                            f"got {len(lists) if isinstance(lists, Sequence) else type(lists).__name__}")
        args = [tensor_list(name, x) for name, x in zip(input_names, lists)]
        if not args[0]:  # nothing to update (an op call without tensors has no device to dispatch on)
            return tuple([] for _ in outputs)
        if torch.is_grad_enabled():
            for x in args:  # plain loops: a generator's frame costs as much as the test on small calls
                for t in x:
                    if t.requires_grad:
                        return _apply_node(node_cls, spec, args, kwargs)
        # (a transform's layers keep the dispatcher's usual path)
        call = eager_call if transforms_active() else eager_call_without_autograd
        return tuple(list(x) for x in call(*args, **kwargs))

    def run(lists: Sequence[Sequence[torch.Tensor]], kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], ...]:
        if torch.compiler.is_compiling():  # Dynamo traces the general path (no C++ helpers)
            return general(lists, kwargs)
        # One C++ pass: lists of plain tensors (no functorch wrapper to unwrap), their lengths,
        # whether one needs a gradient.
        flattened = flatten_lists(lists)
        if flattened is None or transforms_active() or len(kwargs) != num_hyper:
            return general(lists, kwargs)
        flat, sizes, needs_grad = flattened
        if len(sizes) != num_lists:
            return general(lists, kwargs)  # which raises the error
        if not sizes[0]:
            return tuple([] for _ in outputs)
        if not needs_grad:
            return tuple(map(list, eager_call_without_autograd(*lists, **kwargs)))
        try:
            hyper = pick_hyper(kwargs)
        except KeyError:  # the op raises its own error for a missing argument
            return general(lists, kwargs)
        key = sizes if constant_outputs else (sizes, tuple([present(kwargs) for present in outputs]))
        plan = plans.get(key)
        if plan is None:
            if len(plans) >= 1024:  # many distinct structures: start over rather than grow unbounded
                plans.clear()
            plan = plans[key] = _Plan(sizes, _output_sizes(outputs, kwargs, sizes[0]), saved)
        return split_flat(eager_apply(hyper, plan, *flat), plan.output_sizes)

    run.__name__ = run.__qualname__ = f"apply_{op_name}"
    return run


class NodeInfo(NamedTuple):
    """What one fused-optim autograd node computes (:func:`describe_node`).

    Attributes:
        node: the node's name (``FusedAdam``; autograd shows ``FusedAdamBackward``).
        optimizer: the optimizer whose update it is (``Adam``, ``AdamW``...).
        op: the functional op it runs (``adam_update``, ``adam_direction``...).
        kind: ``"update"`` (new params and state) or ``"direction"`` (diffopt's Adam direction).

    >>> info = NodeInfo("FusedAdamW", "AdamW", "adam_update", "update")
    >>> info.optimizer, info.kind
    ('AdamW', 'update')
    """

    node: str
    optimizer: str
    op: str
    kind: str


_IMPL = torch.library.Library("fused_optim", "IMPL")
_NODES: dict[str, type[torch.autograd.Function]] = {}
_NODE_INFO: dict[type[torch.autograd.Function], NodeInfo] = {}

for _spec in FUNCTIONAL_OPS.values():
    _register_functional_fakes(_spec)
    _vmap = _vmap_elementwise if _spec.elementwise else _vmap_per_sample
    torch.library.register_vmap(f"fused_optim::{_spec.name}", _vmap(_spec.op))
    torch.library.register_vmap(f"fused_optim::{_spec.name}_backward", _vmap(_spec.backward_op))
    _NODES[_spec.node] = _make_node(_spec, _spec.node)
    _register_functional_autograd(_spec)
# AdamW runs the Adam op with decoupled weight decay; its own node name keeps graphs readable.
_NODES["FusedAdamW"] = _make_node(FUNCTIONAL_OPS["adam_update"], "FusedAdamW")
_NODES["FusedRAdamW"] = _make_node(FUNCTIONAL_OPS["radam_update"], "FusedRAdamW")
_NODES["FusedNAdamW"] = _make_node(FUNCTIONAL_OPS["nadam_update"], "FusedNAdamW")


def node_class(name: str) -> type[torch.autograd.Function]:
    """The autograd.Function behind a named node, e.g. ``node_class("FusedAdam")``.

    Args:
        name: The node's name: an op's own (``FusedAdam``...) or an alias such as ``FusedAdamW``.

    >>> node_class('FusedAdam').__name__
    'FusedAdam'
    """
    return _NODES[name]


def describe_node(grad_fn: Any) -> NodeInfo | None:
    """What a node of an autograd graph computes, if it is a fused-optim update; else ``None``.

    Every fused update, whether made through :mod:`fused_optim.functional`, :func:`apply_functional`
    or the raw op, records one such node; graph tools (diffopt's ``make_dot``) ask this instead of
    parsing node names.

    Args:
        grad_fn: an autograd node, e.g. a tensor's ``grad_fn`` or an entry of ``next_functions``.

    >>> p = torch.ones(2, requires_grad=True)
    >>> kwargs = dict(lr=0.5, momentum=0.0, dampening=0.0, weight_decay=0.0,
    ...               nesterov=False, maximize=False, first_step=True)
    >>> new_params, _ = torch.ops.fused_optim.sgd_update([p], [torch.ones(2)], [], **kwargs)
    >>> describe_node(new_params[0].grad_fn)
    NodeInfo(node='FusedSGD', optimizer='SGD', op='sgd_update', kind='update')
    >>> describe_node((p * 2).grad_fn) is None
    True
    """
    return _NODE_INFO.get(getattr(type(grad_fn), "_forward_cls", None))  # type: ignore[arg-type]


def apply_functional(op_name: str, lists: Sequence[Sequence[torch.Tensor]], kwargs: dict[str, Any],
                     node: str | None = None) -> tuple[list[torch.Tensor], ...]:
    """Runs a functional op, through its named autograd node when any input needs a gradient.

    Args:
        op_name: a key of :data:`FUNCTIONAL_OPS`.
        lists: the op's positional tensor lists, in schema order.
        kwargs: the op's keyword-only hyper-parameters.
        node: node class name; defaults to the op's own (``FusedAdam`` for ``adam_update``).

    Returns:
        The op's output lists.

    >>> p = torch.ones(2, requires_grad=True)
    >>> kwargs = dict(lr=0.5, momentum=0.0, dampening=0.0, weight_decay=0.0,
    ...               nesterov=False, maximize=False, first_step=True)
    >>> new_params, buffers = apply_functional('sgd_update', [[p], [torch.ones(2)], []], kwargs)
    >>> new_params[0]
    tensor([0.5000, 0.5000], grad_fn=<FusedSGDBackward>)
    """
    runner = _RUNNERS.get((op_name, node))
    if runner is None:
        runner = _RUNNERS[op_name, node] = _make_runner(op_name, node)
    return runner(lists, kwargs)


# The runner of each (op, node) pair, made here for every op with its default node (None and by
# name) and each alias node, so that no call, a traced one in particular, has to make one: Dynamo
# would break the graph on the C++ apply that making one looks up. Other pairs are made on
# first use (and rejected if the node does not run the op).
_RUNNERS: dict[tuple[str, str | None], Callable[..., tuple[list[torch.Tensor], ...]]] = {}
for _info in _NODE_INFO.values():
    _RUNNERS[_info.op, _info.node] = _make_runner(_info.op, _info.node)
for _spec in FUNCTIONAL_OPS.values():
    _RUNNERS[_spec.name, None] = _RUNNERS[_spec.name, _spec.node]


# --- typed wrappers of the in-place ops (what the drop-in optimizers call) ---------------------

@contextlib.contextmanager
def validate_only() -> Iterator[None]:
    """Within this block the in-place ``*_step_`` ops only check their arguments.

    Each op runs every check it makes (hyper-parameters, tensors against the params, step
    counters, aliasing) and returns before its first write, so a caller that makes several calls
    can have all of them checked before any runs: the drop-in optimizers' step does so for its
    parameter groups. The setting is per thread.

    >>> p = torch.ones(2)
    >>> with validate_only():
    ...     sgd_step_([p], [torch.ones(2)], [], lr=1.0, momentum=0.0, dampening=0.0, weight_decay=0.0,
    ...               nesterov=False, maximize=False, first_step=False)
    >>> p
    tensor([1., 1.])
    """
    previous = _switch_validate_only(True)
    try:
        yield
    finally:
        _switch_validate_only(previous)


def _switch_validate_only(enable: bool) -> bool:
    """Sets this thread's validate-only mode; returns the previous setting.

    Never traced: torch.compile cannot put an op returning a bool in its graph, and to learn that
    it ran the op while tracing, which switched the mode for real; a trace given up at a graph
    break inside the block then never ran the restore, leaving every later eager step of the
    thread checking its arguments and updating nothing. While compiling, the switch goes through
    ``torch._dynamo.disable`` (imported only then: fused-optim does not import Dynamo itself) and
    runs at run time, where the block's own order puts it.
    """
    if torch.compiler.is_compiling():
        return torch._dynamo.disable(_lib._validate_only)(enable)
    return _lib._validate_only(enable)


def sgd_step_(params: list[torch.Tensor], grads: list[torch.Tensor], momentum_buffers: list[torch.Tensor], *,
              lr: float, momentum: float, dampening: float, weight_decay: float, nesterov: bool, maximize: bool,
              first_step: bool,
              grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None) -> None:
    """In-place SGD step; ``momentum_buffers`` is empty when ``momentum == 0`` and is overwritten
    (started as the gradient) when ``first_step``.

    Args:
        params, grads: Lists of tensors of one device and dtype, updated in place.
        momentum_buffers: The momentum buffers (empty when ``momentum == 0``).
        lr, momentum, dampening, weight_decay, nesterov, maximize: As in ``torch.optim.SGD``.
        first_step: Whether the buffers start as the gradient (torch's first step) instead of being
            read.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).

    >>> p = torch.ones(2)
    >>> sgd_step_([p], [torch.ones(2)], [], lr=0.5, momentum=0.0, dampening=0.0,
    ...           weight_decay=0.0, nesterov=False, maximize=False, first_step=True)
    >>> p
    tensor([0.5000, 0.5000])
    """
    _eager.sgd_step_(params, grads, momentum_buffers, lr=lr, momentum=momentum, dampening=dampening,
                     weight_decay=weight_decay, nesterov=nesterov, maximize=maximize, first_step=first_step,
                     grad_scale=grad_scale, found_inf=found_inf)


def adam_step_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
               exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor],
               *, lr: float, beta1: float, beta2: float, weight_decay: float, eps: float, amsgrad: bool,
               maximize: bool, decoupled_weight_decay: bool,
               grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
               capturable: bool = False) -> None:
    """In-place Adam/AdamW step; increments ``state_steps`` (torch.optim's per-parameter counters).

    Args:
        params, grads, exp_avgs, exp_avg_sqs: Lists of tensors of one device and dtype, updated in
            place.
        max_exp_avg_sqs: Running maxima (empty unless ``amsgrad``).
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, beta1, beta2, weight_decay, eps, amsgrad, maximize: As in ``torch.optim.Adam``
            (``betas`` split in two).
        decoupled_weight_decay: Whether the weight decay is AdamW's.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, m, v, step = torch.ones(1), torch.zeros(1), torch.zeros(1), torch.tensor(0.0)
    >>> adam_step_([p], [torch.ones(1)], [m], [v], [], [step], lr=0.1, beta1=0.9,
    ...            beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
    ...            decoupled_weight_decay=False)
    >>> p, step
    (tensor([0.9000]), tensor(1.))
    """
    _eager.adam_step_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr=lr, beta1=beta1,
                      beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad, maximize=maximize,
                      decoupled_weight_decay=decoupled_weight_decay, grad_scale=grad_scale,
                      found_inf=found_inf, capturable=capturable)


def rmsprop_step_(params: list[torch.Tensor], grads: list[torch.Tensor], square_avgs: list[torch.Tensor],
                  grad_avgs: list[torch.Tensor], momentum_buffers: list[torch.Tensor],
                  state_steps: list[torch.Tensor], *, lr: float, alpha: float, eps: float, weight_decay: float,
                  momentum: float, centered: bool, maximize: bool,
                  grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                  capturable: bool = False) -> None:
    """In-place RMSprop step; ``grad_avgs`` only when centered, ``momentum_buffers`` only when momentum > 0.

    Args:
        params, grads, square_avgs: Lists of tensors of one device and dtype, updated in place.
        grad_avgs: Gradient averages (empty unless ``centered``).
        momentum_buffers: Momentum buffers (empty unless ``momentum > 0``).
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, alpha, eps, weight_decay, momentum, centered, maximize: As in ``torch.optim.RMSprop``.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, sq, step = torch.ones(1), torch.zeros(1), torch.tensor(0.0)
    >>> rmsprop_step_([p], [torch.ones(1)], [sq], [], [], [step], lr=0.1, alpha=0.75,
    ...               eps=0.0, weight_decay=0.0, momentum=0.0, centered=False, maximize=False)
    >>> p, sq
    (tensor([0.8000]), tensor([0.2500]))
    """
    _eager.rmsprop_step_(params, grads, square_avgs, grad_avgs, momentum_buffers, state_steps, lr=lr,
                         alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                         centered=centered, maximize=maximize, grad_scale=grad_scale,
                         found_inf=found_inf, capturable=capturable)


def adagrad_step_(params: list[torch.Tensor], grads: list[torch.Tensor], state_sums: list[torch.Tensor],
                  state_steps: list[torch.Tensor], *, lr: float, lr_decay: float, weight_decay: float, eps: float,
                  maximize: bool,
                  grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                  capturable: bool = False) -> None:
    """In-place Adagrad step.

    Args:
        params, grads, state_sums: Lists of tensors of one device and dtype, updated in place.
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, lr_decay, weight_decay, eps, maximize: As in ``torch.optim.Adagrad``.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, total, step = torch.ones(1), torch.zeros(1), torch.tensor(0.0)
    >>> adagrad_step_([p], [torch.full((1,), 2.0)], [total], [step], lr=0.1, lr_decay=0.0,
    ...               weight_decay=0.0, eps=0.0, maximize=False)
    >>> p, total
    (tensor([0.9000]), tensor([4.]))
    """
    _eager.adagrad_step_(params, grads, state_sums, state_steps, lr=lr, lr_decay=lr_decay,
                         weight_decay=weight_decay, eps=eps, maximize=maximize, grad_scale=grad_scale,
                         found_inf=found_inf, capturable=capturable)


def adadelta_step_(params: list[torch.Tensor], grads: list[torch.Tensor], square_avgs: list[torch.Tensor],
                   acc_deltas: list[torch.Tensor], state_steps: list[torch.Tensor], *, lr: float, rho: float,
                   eps: float, weight_decay: float, maximize: bool,
                   grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                   capturable: bool = False) -> None:
    """In-place Adadelta step.

    Args:
        params, grads, square_avgs, acc_deltas: Lists of tensors of one device and dtype, updated in
            place.
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, rho, eps, weight_decay, maximize: As in ``torch.optim.Adadelta``.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, sq, acc, step = torch.ones(1), torch.zeros(1), torch.zeros(1), torch.tensor(0.0)
    >>> adadelta_step_([p], [torch.ones(1)], [sq], [acc], [step], lr=1.0, rho=0.0, eps=1.0,
    ...                weight_decay=0.0, maximize=False)
    >>> p, sq
    (tensor([0.2929]), tensor([1.]))
    """
    _eager.adadelta_step_(params, grads, square_avgs, acc_deltas, state_steps, lr=lr, rho=rho, eps=eps,
                          weight_decay=weight_decay, maximize=maximize, grad_scale=grad_scale,
                          found_inf=found_inf, capturable=capturable)


def adamax_step_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                 exp_infs: list[torch.Tensor], state_steps: list[torch.Tensor], *, lr: float, beta1: float,
                 beta2: float, eps: float, weight_decay: float, maximize: bool,
                 grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                 capturable: bool = False) -> None:
    """In-place Adamax step.

    Args:
        params, grads, exp_avgs, exp_infs: Lists of tensors of one device and dtype, updated in
            place.
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, beta1, beta2, eps, weight_decay, maximize: As in ``torch.optim.Adamax`` (``betas`` split
            in two).
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, m, u, step = torch.ones(1), torch.zeros(1), torch.zeros(1), torch.tensor(0.0)
    >>> adamax_step_([p], [torch.ones(1)], [m], [u], [step], lr=0.1, beta1=0.9, beta2=0.999,
    ...              eps=1e-8, weight_decay=0.0, maximize=False)
    >>> p
    tensor([0.9000])
    """
    _eager.adamax_step_(params, grads, exp_avgs, exp_infs, state_steps, lr=lr, beta1=beta1, beta2=beta2,
                        eps=eps, weight_decay=weight_decay, maximize=maximize, grad_scale=grad_scale,
                        found_inf=found_inf, capturable=capturable)


def radam_step_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor], *, lr: float, beta1: float,
                beta2: float, eps: float, weight_decay: float, decoupled_weight_decay: bool,
                maximize: bool,
                grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                capturable: bool = False) -> None:
    """In-place RAdam step.

    Args:
        params, grads, exp_avgs, exp_avg_sqs: Lists of tensors of one device and dtype, updated in
            place.
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize: As in
            ``torch.optim.RAdam`` (``betas`` split in two).
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, m, v, step = torch.ones(1), torch.zeros(1), torch.zeros(1), torch.tensor(0.0)
    >>> radam_step_([p], [torch.ones(1)], [m], [v], [step], lr=0.1, beta1=0.9, beta2=0.999,
    ...             eps=1e-8, weight_decay=0.0, decoupled_weight_decay=False, maximize=False)
    >>> p, m
    (tensor([0.9000]), tensor([0.1000]))
    """
    _eager.radam_step_(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr=lr, beta1=beta1, beta2=beta2,
                       eps=eps, weight_decay=weight_decay, decoupled_weight_decay=decoupled_weight_decay,
                       maximize=maximize, grad_scale=grad_scale,
                       found_inf=found_inf, capturable=capturable)


def lion_step_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
               state_steps: list[torch.Tensor], *, lr: float, beta1: float, beta2: float, weight_decay: float,
               maximize: bool,
               grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
               capturable: bool = False) -> None:
    """In-place Lion step (Chen et al., 2023); increments ``state_steps``, which Lion itself does not read.

    Args:
        params, grads, exp_avgs: Lists of tensors of one device and dtype, updated in place.
        state_steps: Per-parameter step counters (scalar tensors), incremented in place.
        lr, beta1, beta2, weight_decay, maximize: As in :class:`fused_optim.Lion` (``betas`` split
            in two).
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, m, step = torch.ones(2), torch.zeros(2), torch.tensor(0.0)
    >>> lion_step_([p], [torch.tensor([0.5, -2.0])], [m], [step], lr=0.1, beta1=0.9, beta2=0.99,
    ...            weight_decay=0.0, maximize=False)
    >>> p, step
    (tensor([0.9000, 1.1000]), tensor(1.))
    """
    _eager.lion_step_(params, grads, exp_avgs, state_steps, lr=lr, beta1=beta1, beta2=beta2,
                      weight_decay=weight_decay, maximize=maximize, grad_scale=grad_scale,
                      found_inf=found_inf, capturable=capturable)


def adan_step_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
               exp_avg_diffs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor], prev_grads: list[torch.Tensor],
               state_steps: list[torch.Tensor], *, lr: float, beta1: float, beta2: float, beta3: float, eps: float,
               weight_decay: float, no_prox: bool, maximize: bool,
               grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
               capturable: bool = False) -> None:
    """In-place Adan step (Xie et al., 2022); increments ``state_steps``.

    A tensor whose counter reaches 1 takes this step's gradient difference as zero (its
    ``prev_grads`` entry is not read); every tensor's ``prev_grads`` entry becomes its gradient.

    Args:
        params, grads, exp_avgs, exp_avg_diffs, exp_avg_sqs, prev_grads: Lists of tensors of one
            device and dtype, updated in place.
        state_steps: Per-parameter step counters (scalar tensors), incremented in place.
        lr, beta1, beta2, beta3, eps, weight_decay, no_prox, maximize: As in
            :class:`fused_optim.Adan` (``betas`` split in three).
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, z, step = torch.ones(1), torch.zeros(1), torch.tensor(0.0)
    >>> adan_step_([p], [torch.ones(1)], [z.clone()], [z.clone()], [z.clone()], [z.clone()], [step], lr=0.1,
    ...            beta1=0.98, beta2=0.92, beta3=0.99, eps=0.0, weight_decay=0.0, no_prox=False, maximize=False)
    >>> p
    tensor([0.9000])
    """
    _eager.adan_step_(params, grads, exp_avgs, exp_avg_diffs, exp_avg_sqs, prev_grads, state_steps, lr=lr,
                      beta1=beta1, beta2=beta2, beta3=beta3, eps=eps, weight_decay=weight_decay,
                      no_prox=no_prox, maximize=maximize, grad_scale=grad_scale,
                      found_inf=found_inf, capturable=capturable)


def nadam_step_(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                exp_avg_sqs: list[torch.Tensor], mu_products: list[torch.Tensor], state_steps: list[torch.Tensor], *,
                lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, momentum_decay: float,
                decoupled_weight_decay: bool, maximize: bool,
                grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                capturable: bool = False) -> None:
    """In-place NAdam step; increments ``state_steps`` and multiplies each ``mu_products`` entry by
    this step's momentum coefficient (both in their own dtype, as torch.optim does).

    Args:
        params, grads, exp_avgs, exp_avg_sqs: Lists of tensors of one device and dtype, updated in
            place.
        mu_products: torch.optim's per-parameter products of the momentum coefficients (scalar
            tensors), updated in place.
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize: As in
            ``torch.optim.NAdam`` (``betas`` split in two).
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, m, v, prod, step = torch.ones(1), torch.zeros(1), torch.zeros(1), torch.tensor(1.0), torch.tensor(0.0)
    >>> nadam_step_([p], [torch.ones(1)], [m], [v], [prod], [step], lr=0.1, beta1=0.9, beta2=0.999,
    ...             eps=1e-8, weight_decay=0.0, momentum_decay=4e-3, decoupled_weight_decay=False,
    ...             maximize=False)
    >>> p, prod
    (tensor([0.8944]), tensor(0.4501))
    """
    _eager.nadam_step_(params, grads, exp_avgs, exp_avg_sqs, mu_products, state_steps, lr=lr, beta1=beta1,
                       beta2=beta2, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                       decoupled_weight_decay=decoupled_weight_decay, maximize=maximize, grad_scale=grad_scale,
                       found_inf=found_inf, capturable=capturable)


def rprop_step_(params: list[torch.Tensor], grads: list[torch.Tensor], prevs: list[torch.Tensor],
                step_sizes: list[torch.Tensor], state_steps: list[torch.Tensor], *, lr: float, etaminus: float,
                etaplus: float, step_size_min: float, step_size_max: float, maximize: bool,
                grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                capturable: bool = False) -> None:
    """In-place Rprop step.

    Args:
        params, grads, prevs, step_sizes: Lists of tensors of one device and dtype, updated in
            place (``step_sizes`` start at ``lr``, as torch.optim creates them).
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr: Checked only: it seeds the step sizes of new parameters, which the caller creates.
        etaminus, etaplus, step_size_min, step_size_max, maximize: As in ``torch.optim.Rprop``
            (``etas`` and ``step_sizes`` split in two).
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, prev, size, step = torch.ones(2), torch.zeros(2), torch.full((2,), 0.1), torch.tensor(0.0)
    >>> rprop_step_([p], [torch.tensor([2.0, -3.0])], [prev], [size], [step], lr=0.1, etaminus=0.5,
    ...             etaplus=1.2, step_size_min=1e-6, step_size_max=50.0, maximize=False)
    >>> p, prev
    (tensor([0.9000, 1.1000]), tensor([ 2., -3.]))
    """
    _eager.rprop_step_(params, grads, prevs, step_sizes, state_steps, lr=lr, etaminus=etaminus,
                       etaplus=etaplus, step_size_min=step_size_min, step_size_max=step_size_max,
                       maximize=maximize, grad_scale=grad_scale,
                       found_inf=found_inf, capturable=capturable)


def asgd_step_(params: list[torch.Tensor], grads: list[torch.Tensor], axs: list[torch.Tensor],
               etas: list[torch.Tensor], mus: list[torch.Tensor], state_steps: list[torch.Tensor], *, lr: float,
               lambd: float, alpha: float, t0: float, weight_decay: float, maximize: bool,
               grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
               capturable: bool = False) -> None:
    """In-place ASGD step: uses each parameter's ``etas``/``mus`` entry, then sets them to the
    schedule's next values (torch.optim's per-parameter state scalars).

    Args:
        params, grads, axs: Lists of tensors of one device and dtype, updated in place.
        etas, mus: The per-parameter step sizes and averaging weights (scalar tensors).
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, lambd, alpha, t0, weight_decay, maximize: As in ``torch.optim.ASGD``.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
        capturable: Whether the kernel reads and advances ``state_steps`` itself, on the params'
            device, where they must be (see the note on ``capturable`` above ``STEP_OPS``).

    >>> p, ax, step = torch.ones(1), torch.zeros(1), torch.tensor(0.0)
    >>> eta, mu = torch.tensor(0.1), torch.tensor(1.0)
    >>> asgd_step_([p], [torch.ones(1)], [ax], [eta], [mu], [step], lr=0.1, lambd=0.0, alpha=0.75,
    ...            t0=1e6, weight_decay=0.0, maximize=False)
    >>> p, ax
    (tensor([0.9000]), tensor([0.9000]))
    """
    _eager.asgd_step_(params, grads, axs, etas, mus, state_steps, lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                      weight_decay=weight_decay, maximize=maximize, grad_scale=grad_scale,
                      found_inf=found_inf, capturable=capturable)


def adafactor_step_(params: list[torch.Tensor], grads: list[torch.Tensor], row_vars: list[torch.Tensor],
                    col_vars: list[torch.Tensor], variances: list[torch.Tensor], state_steps: list[torch.Tensor], *,
                    lr: float, beta2_decay: float, eps1: float, eps2: float, d: float, weight_decay: float,
                    maximize: bool, factored: bool,
                    grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
                    capturable: bool = False) -> None:
    """In-place Adafactor step, for parameters of two or more dimensions (``factored``: their
    ``row_vars`` and ``col_vars``; ``variances`` empty) or for the others (``variances``; the
    factored lists empty).

    Args:
        params, grads: Lists of tensors of one device and dtype; params are updated in place.
        row_vars, col_vars: torch.optim's factored second moments (shaped like a parameter with its
            last, respectively second-to-last, dimension reduced to 1), updated in place.
        variances: The full second moments of vectors and scalars, updated in place.
        state_steps: torch.optim's per-parameter step counters (scalar tensors), incremented in
            place.
        lr, beta2_decay, eps1, eps2, d, weight_decay, maximize: As in ``torch.optim.Adafactor``
            (``eps`` split in two; ``eps1`` resolved to a number).
        factored: Which of the two kinds of parameters this call updates.
        grad_scale, found_inf: ``torch.amp.GradScaler``'s scale and skip flag (see ``_AMP_ARGS``).
            The gradients are unscaled by a pass of their own, as the per-tensor reductions read
            them too; where ``found_inf`` is set nothing is written, but with ``capturable`` (which
            cannot know it on the host) the gradients are still unscaled, as
            ``GradScaler.unscale_`` leaves them.
        capturable: Whether the kernels read ``state_steps`` (and ``found_inf``) on the params'
            device and advance the counters there (see the note on ``capturable`` above
            ``STEP_OPS``); torch.optim.Adafactor has no such option.

    >>> p, v, step = torch.tensor([3.0, 4.0]), torch.zeros(2), torch.tensor(0.0)
    >>> adafactor_step_([p], [torch.tensor([1.0, -1.0])], [], [], [v], [step], lr=0.5, beta2_decay=-0.8,
    ...                 eps1=1e-30, eps2=0.0, d=1.0, weight_decay=0.0, maximize=False, factored=False)
    >>> p, v
    (tensor([1.2322, 5.7678]), tensor([1., 1.]))
    """
    _eager.adafactor_step_(params, grads, row_vars, col_vars, variances, state_steps, lr=lr,
                           beta2_decay=beta2_decay, eps1=eps1, eps2=eps2, d=d, weight_decay=weight_decay,
                           maximize=maximize, factored=factored, grad_scale=grad_scale,
                           found_inf=found_inf, capturable=capturable)


# --- Muon: its element-wise passes around a batched Newton-Schulz orthogonalization ---------------

def muon_direction_(grads: list[torch.Tensor], momentum_buffers: list[torch.Tensor],
                    directions: list[torch.Tensor], *, momentum: float, nesterov: bool) -> None:
    """Muon's first pass, in place: ``b <- lerp(b, g, 1 - momentum)`` and the direction to
    orthogonalize, ``lerp(g, b, momentum)`` with ``nesterov``, else ``b``, written to ``directions``.

    Args:
        grads: Matrices of one device and dtype (read only).
        momentum_buffers: torch.optim.Muon's ``momentum_buffer`` of each, updated in place.
        directions: Tensors shaped like ``grads``, overwritten (views of one stacked tensor are
            fine: :func:`muon_step_` passes the slices of each shape's batch).
        momentum, nesterov: As in :class:`fused_optim.Muon`.

    >>> b, d = torch.zeros(1, 2), torch.empty(1, 2)
    >>> muon_direction_([torch.tensor([[2.0, -4.0]])], [b], [d], momentum=0.5, nesterov=False)
    >>> b, d
    (tensor([[ 1., -2.]]), tensor([[ 1., -2.]]))
    """
    _eager.muon_direction_(grads, momentum_buffers, directions, momentum=momentum, nesterov=nesterov)


def muon_apply_(params: list[torch.Tensor], updates: list[torch.Tensor], *, lr: float, weight_decay: float,
                update_scale: float) -> None:
    """Muon's last pass, in place: ``p <- p (1 - lr weight_decay) - lr update_scale u`` (Adafactor's
    apply kernel: the decoupled decay and the scaled update in one pass).

    Args:
        params: Matrices of one device and dtype, updated in place.
        updates: The orthogonalized updates, shaped like ``params`` and of their dtype.
        lr, weight_decay: As in :class:`fused_optim.Muon`.
        update_scale: The learning-rate adjustment of these matrices' shape (:func:`muon_lr_scale`).

    >>> p = torch.ones(1, 2)
    >>> muon_apply_([p], [torch.tensor([[1.0, -1.0]])], lr=0.5, weight_decay=1.0, update_scale=1.0)
    >>> p
    tensor([[0., 1.]])
    """
    _eager.muon_apply_(params, updates, lr=lr, weight_decay=weight_decay, update_scale=update_scale)


def muon_lr_scale(shape: Sequence[int], adjust_lr_fn: str | None) -> float:
    """The factor torch.optim.Muon multiplies the learning rate by for a matrix of ``shape`` (A, B):
    ``sqrt(max(1, A / B))`` for ``None`` or ``"original"`` (Keller Jordan's), ``0.2 sqrt(max(A, B))``
    for ``"match_rms_adamw"`` (Moonshot's, the update's RMS matched to AdamW's).

    Args:
        shape: The matrix's shape ``(A, B)``.
        adjust_lr_fn: ``None``, ``"original"`` or ``"match_rms_adamw"``, as in :class:`fused_optim.Muon`.

    >>> muon_lr_scale((512, 128), None), muon_lr_scale((128, 512), "match_rms_adamw")
    (2.0, 4.525483399593905)
    """
    rows, cols = shape[0], shape[1]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    raise ValueError(f"Muon: adjust_lr_fn must be None, 'original' or 'match_rms_adamw', not {adjust_lr_fn!r}")


def _check_newton_schulz(coefficients: Sequence[float], steps: int) -> None:
    if len(coefficients) != 3:
        raise ValueError(f"Muon: ns_coefficients must be the three numbers (a, b, c), got {tuple(coefficients)}")
    if not 0 <= steps < 100:  # torch.optim.Muon's bound
        raise ValueError(f"Muon: ns_steps must be in [0, 100), got {steps}")


def newton_schulz(matrices: torch.Tensor, coefficients: Sequence[float], steps: int, eps: float, *,
                  dtype: torch.dtype | None = torch.bfloat16) -> torch.Tensor:
    """Muon's orthogonalization of a batch of equally shaped matrices, one batched matrix-product
    chain for the whole batch (torch.optim.Muon runs it one matrix at a time).

    Each matrix ``X`` (taken with rows <= columns: a tall one is transposed and back) is scaled
    to a Frobenius norm of 1 (the norm clamped below by ``eps``), then ``steps`` times
    ``G = X X^T``, ``X <- a X + (b G + c G^2) X``. Differentiable (torch ops only).

    Args:
        matrices: A batch ``(n, A, B)`` of matrices.
        coefficients: ``(a, b, c)``.
        steps: How many iterations, in [0, 100).
        eps: The floor of the norm.
        dtype: The precision of the iteration: ``torch.bfloat16`` as torch.optim.Muon (the
            default), or ``None`` for the matrices' own dtype (float64 for ``gradcheck``).

    Returns:
        The orthogonalized batch, in ``dtype`` (a view transposed back for tall matrices).

    >>> q = newton_schulz(torch.eye(2).expand(3, 2, 2) * 5, (1.5, -0.5, 0.0), 8, 1e-7, dtype=None)
    >>> torch.allclose(q, torch.eye(2).expand(3, 2, 2), atol=1e-5)
    True
    """
    _check_newton_schulz(coefficients, steps)
    a, b, c = coefficients
    x = matrices if dtype is None else matrices.to(dtype)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.transpose(-2, -1)
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = torch.bmm(x, x.transpose(-2, -1))
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, poly, x, beta=a)
    return x.transpose(-2, -1) if tall else x


def shape_batches(tensors: Sequence[torch.Tensor]) -> dict[tuple[int, ...], list[int]]:
    """The indices of ``tensors`` by shape, in order of first appearance: Muon's batches.

    Args:
        tensors: Tensors of any shapes.

    >>> shape_batches([torch.zeros(2, 3), torch.zeros(3, 2), torch.zeros(2, 3)])
    {(2, 3): [0, 2], (3, 2): [1]}
    """
    batches: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(tensors):
        batches.setdefault(tuple(t.shape), []).append(i)
    return batches


def muon_step_(params: list[torch.Tensor], grads: list[torch.Tensor], momentum_buffers: list[torch.Tensor], *,
               lr: float, weight_decay: float, momentum: float, nesterov: bool, ns_coefficients: Sequence[float],
               eps: float, ns_steps: int, adjust_lr_fn: str | None) -> Any:
    """One in-place torch.optim.Muon step over matrices of one device and dtype: the direction pass
    (one call for all), then per shape one batched :func:`newton_schulz` and one apply pass.

    Every call is checked before the first write (this step honours :func:`validate_only`); no
    tensor value is read on the host. Returns ``NotImplemented``, having done nothing, for a sparse
    gradient (the drop-in step then rejects it by name).

    Args:
        params, grads, momentum_buffers: Matrices, their gradients and momentum buffers (updated in
            place).
        lr, weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn: As in
            :class:`fused_optim.Muon`.

    >>> p, b = torch.eye(2), torch.zeros(2, 2)
    >>> muon_step_([p], [torch.eye(2)], [b], lr=0.1, weight_decay=0.0, momentum=0.0, nesterov=False,
    ...            ns_coefficients=(1.5, -0.5, 0.0), eps=1e-7, ns_steps=0, adjust_lr_fn=None)
    >>> torch.allclose(p, torch.eye(2) * (1 - 0.1 / 2 ** 0.5), atol=1e-2)
    True
    """
    if any(g.is_sparse for g in grads):
        return NotImplemented
    _check_newton_schulz(ns_coefficients, ns_steps)
    batches = shape_batches(grads)
    # DTensor matrices (FSDP2, TP): the element-wise passes run on the local shards, but the
    # orthogonalization needs whole matrices, so each shape's batch is gathered (_newton_schulz_sharded)
    sharded = any(hasattr(g, "_local_tensor") for g in grads)
    stacks: list[torch.Tensor | None] = []  # None: a sharded shape, gathered for Newton-Schulz
    directions: list[torch.Tensor] = [*grads]  # each replaced by its slice of its shape's batch
    for shape, indices in batches.items():
        if sharded:
            stacks.append(None)
            for i in indices:
                directions[i] = torch.empty_like(grads[i])  # placed like its gradient
            continue
        batch = grads[indices[0]].new_empty((len(indices), *shape))
        stacks.append(batch)
        for i, view in zip(indices, batch.unbind(0)):
            directions[i] = view
    kwargs = {"lr": lr, "weight_decay": weight_decay}
    calls = []  # the apply pass of each shape
    previous = _switch_validate_only(True)
    try:  # every call checked before the first one writes
        _eager.muon_direction_(grads, momentum_buffers, directions, momentum=momentum, nesterov=nesterov)
        for shape, indices in batches.items():
            group_params, updates = [params[i] for i in indices], [directions[i] for i in indices]
            _eager.muon_apply_(group_params, updates, update_scale=1.0, **kwargs)  # rejects non-matrices
            calls.append((group_params, updates, muon_lr_scale(shape, adjust_lr_fn)))
    finally:
        _switch_validate_only(previous)
    if previous:  # the caller asked for the checks only
        return None
    _eager.muon_direction_(grads, momentum_buffers, directions, momentum=momentum, nesterov=nesterov)
    for stack, (group_params, updates, scale) in zip(stacks, calls):
        if stack is None:
            _newton_schulz_sharded(updates, ns_coefficients, ns_steps, eps)
        else:
            stack.copy_(newton_schulz(stack, ns_coefficients, ns_steps, eps))  # back to the params' dtype and layout
        _eager.muon_apply_(group_params, updates, update_scale=scale, **kwargs)
    return None


def _newton_schulz_sharded(directions: list[Any], coefficients: Sequence[float], steps: int, eps: float) -> None:
    """Orthogonalizes equally shaped DTensor matrices in place: each is gathered whole, the batch
    runs one :func:`newton_schulz` chain on every rank (the same result everywhere), and each rank
    keeps its own shard. Exact on any placement, at the cost of one all-gather per matrix
    (torch.optim.Muon orthogonalizes the local shards instead, which is not Muon's update)."""
    from torch.distributed.tensor import DTensor, Replicate

    whole = newton_schulz(torch.stack([d.full_tensor() for d in directions]), coefficients, steps, eps)
    for d, o in zip(directions, whole.unbind(0)):
        mesh = d.device_mesh
        replicated = DTensor.from_local(o.to(d.dtype), mesh, [Replicate()] * mesh.ndim, run_check=False)
        d.copy_(replicated.redistribute(mesh, d.placements))  # Replicate -> Shard is a local slice


# --- DTensor -------------------------------------------------------------------------------------

class _RegisterOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Registers the DTensor handlers (:mod:`fused_optim._dtensor`) right after
    ``torch.distributed.tensor`` is imported, wherever that happens.

    fused-optim never imports that module itself (it costs about a second), and DTensors exist only
    once it is imported: so this finder, ahead of the others in ``sys.meta_path``, wraps the
    module's loader and leaves ``sys.meta_path`` again after that one import.
    """

    _NAME = "torch.distributed.tensor"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._NAME:
            return None
        self.remove()
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _register_dtensor()

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def _register_dtensor() -> None:
    # Never breaks the import of torch.distributed.tensor: a torch whose DTensor internals moved
    # gets a warning, and DTensor calls of these ops then fail as they do without this support.
    try:
        from fused_optim import _dtensor

        _dtensor.register()
    except Exception as error:
        warnings.warn(f"fused_optim: DTensor support is unavailable with torch {torch.__version__} "
                      f"({type(error).__name__}: {error})", RuntimeWarning, stacklevel=2)


if _RegisterOnImport._NAME in sys.modules:
    _register_dtensor()
else:
    sys.meta_path.insert(0, _RegisterOnImport())
