"""The unboxed eager call (fused_optim._native.EAGER, csrc/eager_call.h) against torch.ops.

It must compute exactly what the op computes, raise the op's errors, bump the same version
counters, and step aside (NotImplemented) wherever a layer above the kernel has work to do.
"""

from __future__ import annotations

import pytest
import torch
from helpers import FUNCTIONAL_CASES, FunctionalCase, SeenOps, op

from fused_optim import _native, ops

# The fast path exists only under the torch it was compiled against (fused_optim._native).
pytestmark = pytest.mark.skipif(not _native.BUILD_INFO["eager"], reason=f"no fast path: {_native.EAGER_REASON}")

ADAM = dict(lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
            decoupled_weight_decay=False)


def _adam_step_args(n: int = 3):
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(4, generator=gen) for _ in range(n)]
    return [params, [torch.randn(4, generator=gen) for _ in range(n)], [torch.zeros(4) for _ in range(n)],
            [torch.zeros(4) for _ in range(n)], [], [torch.tensor(0.0) for _ in range(n)]]


def test_every_op_of_the_library_has_an_eager_call():
    schemas = {s.name.removeprefix("fused_optim::") for s in torch._C._jit_get_all_schemas()
               if s.name.startswith("fused_optim::")}
    # (not the switches; the kept steps, csrc/kept_step.h, included: one <op>keep per in-place step)
    kept = {name for name in schemas if name.endswith("_step_keep")} | {"kept_step_", "kept_free"}
    assert len(kept) == 2 + sum(name.endswith("_step_") and name != "kept_step_" for name in schemas)
    assert set(_native.EAGER) == schemas - {"_validate_only", "_state_scalars_on_host", "_asgd_foreach_eta"}
    assert kept <= set(_native.EAGER)


@pytest.mark.parametrize("case", FUNCTIONAL_CASES, ids=lambda c: c.id)
def test_eager_call_equals_the_op(case: FunctionalCase):
    # The shortcut and the dispatcher run the same kernel: bit for bit.
    lists = case.make(torch.float32)
    got = _native.EAGER[case.op](*lists, **case.kwargs)
    assert got is not NotImplemented
    want = op(case.op)(*lists, **case.kwargs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is list
        for a, b in zip(g, w):
            assert torch.equal(a, b)
    grads = [list(x) for x in want]
    back = _native.EAGER[case.op + "_backward"](*grads, *[lists[i] for i in ops.FUNCTIONAL_OPS[case.op].saved],
                                            **case.kwargs)
    want_back = op(case.op + "_backward")(*grads, *[lists[i] for i in ops.FUNCTIONAL_OPS[case.op].saved],
                                          **case.kwargs)
    for g, w in zip(back, want_back):
        assert all(torch.equal(a, b) for a, b in zip(g, w))


def test_in_place_step_updates_and_bumps_versions():
    args, reference = _adam_step_args(), _adam_step_args()
    versions = [t._version for t in args[0]]
    assert _native.EAGER["adam_step_"](*args, **ADAM) is None
    op("adam_step_")(*reference, **ADAM)
    for got, want in zip(args, reference):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(t._version > v for t, v in zip(args[0], versions))
    assert [float(s) for s in args[5]] == [1.0, 1.0, 1.0]


def test_errors_are_the_ops_own():
    args = _adam_step_args()
    before = [t.clone() for t in args[0]]
    with pytest.raises(ValueError, match="learning rate") as eager:
        _native.EAGER["adam_step_"](*args, **dict(ADAM, lr=-1.0))
    with pytest.raises(ValueError, match="learning rate") as boxed:
        op("adam_step_")(*args, **dict(ADAM, lr=-1.0))
    assert str(eager.value).splitlines()[0] == str(boxed.value).splitlines()[0]
    args[1][1] = torch.zeros(5)
    with pytest.raises(ValueError, match=r"grads\[1\] has shape"):
        _native.EAGER["adam_step_"](*args, **ADAM)
    assert all(torch.equal(a, b) for a, b in zip(args[0], before))  # nothing was written


@pytest.mark.parametrize("why", ["missing", "unknown keyword", "int for bool", "tensor for float", "not a list",
                                 "subclass", "meta", "requires grad", "negative view"])
def test_steps_aside_where_it_is_no_shortcut(why: str):
    args, kwargs = _adam_step_args(), dict(ADAM)
    if why == "missing":
        del kwargs["eps"]
    elif why == "unknown keyword":
        kwargs["betas"] = (0.9, 0.99)
    elif why == "int for bool":
        kwargs["amsgrad"] = 0
    elif why == "tensor for float":
        kwargs["lr"] = torch.tensor(0.1)
    elif why == "not a list":
        args[0] = iter(args[0])
    elif why == "subclass":
        args[0][0] = args[0][0].as_subclass(type("Sub", (torch.Tensor,), {}))
    elif why == "meta":
        args = [[t.to("meta") for t in lst] for lst in args]
    elif why == "requires grad":
        args[0][0].requires_grad_()
    elif why == "negative view":
        args[1][0] = torch._neg_view(args[1][0])
    before = [t.clone() for t in args[0] if t.device.type == "cpu"]
    assert _native.EAGER["adam_step_"](*args, **kwargs) is NotImplemented
    assert all(torch.equal(a, b) for a, b in zip([t for t in args[0] if t.device.type == "cpu"], before))


def test_steps_aside_under_modes_transforms_and_the_profiler():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update")
    lists = case.make(torch.float32)

    with SeenOps() as mode:
        assert _native.EAGER["adam_update"](*lists, **case.kwargs) is NotImplemented
        ops.apply_functional("adam_update", lists, case.kwargs)  # the wrapper falls back to the op
    assert torch.ops.fused_optim.adam_update.default in mode.seen
    with torch.profiler.profile() as prof:
        assert _native.EAGER["adam_update"](*lists, **case.kwargs) is NotImplemented
        ops.apply_functional("adam_update", lists, case.kwargs)
    assert any(e.name == "fused_optim::adam_update" for e in prof.events())
    with torch.autograd.forward_ad.dual_level():
        assert _native.EAGER["adam_update"](*lists, **case.kwargs) is not NotImplemented  # no dual tensors
    with torch.autocast("cpu"):
        assert _native.EAGER["adam_update"](*lists, **case.kwargs) is NotImplemented

    def inside(p):
        return torch._C._are_functorch_transforms_active() and _native.EAGER["adam_update"](
            [p], *[[x[0]] for x in lists[1:4]], [], **case.kwargs) is NotImplemented

    # vmap over a batch of one parameter: under the transform the eager call must step aside
    assert torch.func.vmap(lambda p: torch.tensor(inside(p)))(lists[0][0].unsqueeze(0)).all()


def test_differentiable_update_through_the_eager_path_keeps_its_node_and_gradient():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update")
    lists = case.make(torch.float64, shapes=[(3,), (2,)])
    leaves = [[t.requires_grad_() for t in lst] for lst in lists]
    out = ops.apply_functional("adam_update", leaves, case.kwargs)
    assert out[0][0].grad_fn is not None and ops.describe_node(out[0][0].grad_fn).node == "FusedAdam"

    def fn(*flat):
        sizes = [len(x) for x in lists]
        it = iter(flat)
        args = [[next(it) for _ in range(n)] for n in sizes]
        return tuple(t for lst in ops.apply_functional("adam_update", args, case.kwargs) for t in lst)

    assert torch.autograd.gradcheck(fn, tuple(t for lst in leaves for t in lst))
