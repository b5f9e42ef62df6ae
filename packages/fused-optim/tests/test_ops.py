"""The custom ops themselves: torch.library.opcheck on every op, and argument checking that
leaves the caller's tensors untouched."""

from __future__ import annotations

import pytest
import torch
from helpers import FUNCTIONAL_CASES, called, op, step_args

from fused_optim import _C
from fused_optim.ops import FUNCTIONAL_OPS, STEP_OPS, validate_only

# opcheck tests each op's registration (schema, fake and autograd kernels, AOT dispatch) and
# compares no result with a reference, so CI's second run of this file, through the emulated CUDA
# launches (noxfile.py), would repeat the first one's answer at a third of that run's cost.
registration = pytest.mark.skipif(_C._emulate_cuda(), reason="the op registration: the run without emulation checks it")

# One representative of each functional op (the first case of each).
_FIRST = {}
for _c in FUNCTIONAL_CASES:
    _FIRST.setdefault(_c.op, _c)
_RICH = {c.op: c for c in FUNCTIONAL_CASES}  # the last case: the most options switched on


@pytest.mark.parametrize("name", STEP_OPS)
@registration
def test_opcheck_step_ops(name):
    args, kwargs = step_args(name)
    torch.library.opcheck(op(name), args, kwargs)


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("name", STEP_OPS)
@registration
def test_opcheck_step_ops_with_amp_arguments(name, found_inf):
    # With a grad_scale the gradients are written (unscaled in place), which the schema declares.
    args, kwargs = step_args(name)
    torch.library.opcheck(op(name), args, dict(kwargs, grad_scale=torch.tensor(4.0),
                                               found_inf=torch.tensor(found_inf)))


@pytest.mark.parametrize("name", sorted(FUNCTIONAL_OPS))
@registration
def test_opcheck_functional_ops(name):
    case = _RICH[name]
    lists = [[t.float().requires_grad_() for t in lst] for lst in case.make()]
    torch.library.opcheck(op(name), tuple(lists), case.kwargs)


@pytest.mark.parametrize("name", sorted(FUNCTIONAL_OPS))
@registration
def test_opcheck_backward_ops(name):
    spec = FUNCTIONAL_OPS[name]
    case = _RICH[name]
    lists = [[t.float() for t in lst] for lst in case.make()]
    outputs = op(name)(*lists, **case.kwargs)
    grads = [[torch.ones_like(t) for t in out] for out in outputs]
    grads[-1] = [None] * len(grads[-1])  # an unused output: None entries mean zeros
    saved = [lists[i] for i in spec.saved]
    torch.library.opcheck(op(name + "_backward"), (*grads, *saved), case.kwargs)


def test_step_op_matches_functional_op():
    case = _RICH["adam_update"]
    lists = case.make()
    steps = [torch.tensor(float(case.kwargs["step"] - 1)) for _ in lists[0]]
    expected = op("adam_update")(*lists, **case.kwargs)
    kwargs = {k: v for k, v in case.kwargs.items() if k != "step"}
    op("adam_step_")(lists[0], lists[1], lists[2], lists[3], lists[4], steps, **kwargs)
    for got, want in zip([lists[0], lists[2], lists[3], lists[4]], expected):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=0, atol=0)  # one kernel behind both ops: bit for bit
    assert all(s.item() == case.kwargs["step"] for s in steps)


def _adam_call(params, grads, m, v, steps, **overrides):
    kwargs = dict(lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
                  decoupled_weight_decay=False)
    kwargs.update(overrides)
    called("adam_step_")(params, grads, m, v, [], steps, **kwargs)


def _assert_rejected_untouched(args, error, match):
    """adam_step_ on ``args`` raises ``error`` and every tensor keeps its value (a NaN its NaN)."""
    snapshot = [[t.clone() for t in lst] for lst in args]
    with pytest.raises(error, match=match):
        _adam_call(*args)
    for lst, old in zip(args, snapshot):
        for t, o in zip(lst, old):
            if not t.is_meta:
                assert torch.equal(t.to_dense(), o.to_dense()) or (t.isnan().all() and o.isnan().all())


@pytest.mark.parametrize("mutate, error, match", [
    (lambda a: a[1].__setitem__(1, torch.ones(5)), ValueError, "shape"),
    (lambda a: a[1].__setitem__(1, torch.ones(3, dtype=torch.float64)), TypeError, "dtype"),
    (lambda a: a[0].__setitem__(1, torch.ones(3, dtype=torch.float64)), TypeError, "mixed dtypes"),
    (lambda a: a[0].__setitem__(1, torch.ones(3, dtype=torch.int64)), TypeError, "dtype"),
    (lambda a: a[0].__setitem__(1, torch.ones(3, dtype=torch.complex64)), TypeError, "complex"),
    (lambda a: a[1].__setitem__(1, torch.ones(3).to_sparse()), ValueError, "sparse|layout"),
    (lambda a: a[1].pop(), ValueError, "grads has 1 tensors"),
    (lambda a: a[2].__setitem__(0, a[0][0]), ValueError, "shares memory"),
    (lambda a: a[0].__setitem__(1, a[0][0]), ValueError, "appears twice|shape"),
    (lambda a: a[4].__setitem__(0, torch.ones(2)), ValueError, "one-element"),
])
def test_bad_arguments_leave_tensors_untouched(mutate, error, match):
    params = [torch.ones(3), torch.full((3,), 2.0)]
    args = [params, [torch.ones(3), torch.ones(3)], [torch.zeros(3), torch.zeros(3)],
            [torch.zeros(3), torch.zeros(3)], [torch.tensor(0.0), torch.tensor(0.0)]]
    mutate(args)
    _assert_rejected_untouched(args, error, match)


@pytest.mark.parametrize("name", STEP_OPS)
def test_validate_only_checks_a_step_op_and_writes_nothing(name):
    args, kwargs = step_args(name)
    snapshot = [[t.clone() for t in lst] for lst in args]
    with validate_only():
        op(name)(*args, **kwargs)
    for lst, old in zip(args, snapshot):
        for t, o in zip(lst, old):
            assert torch.equal(t, o)  # params, state and step counters alike
    with validate_only(), pytest.raises(ValueError, match="learning rate"):
        op(name)(*args, **dict(kwargs, lr=-1.0))  # the op's own checks still run
    op(name)(*args, **kwargs)  # and the mode ends with the block
    assert not torch.equal(args[0][0], snapshot[0][0])


def test_validate_only_is_restored_after_an_error():
    args, kwargs = step_args("sgd_step_")
    with pytest.raises(ValueError), validate_only():
        op("sgd_step_")(*args, **dict(kwargs, lr=-1.0))
    before = args[0][0].clone()
    op("sgd_step_")(*args, **kwargs)
    assert not torch.equal(args[0][0], before)


@pytest.mark.parametrize("overrides, match", [
    (dict(lr=-0.1), "learning rate"), (dict(beta1=1.0), "beta1"), (dict(beta2=-0.5), "beta2"),
    (dict(eps=-1.0), "epsilon"), (dict(weight_decay=-1.0), "weight_decay"),
])
def test_bad_hyper_parameters_raise_value_error(overrides, match):
    p, steps = [torch.ones(3)], [torch.tensor(0.0)]
    with pytest.raises(ValueError, match=match):
        _adam_call(p, [torch.ones(3)], [torch.zeros(3)], [torch.zeros(3)], steps, **overrides)
    assert torch.equal(p[0], torch.ones(3)) and steps[0].item() == 0.0


def test_state_lists_must_match_options():
    p = [torch.ones(2)]
    with pytest.raises(ValueError, match="max_exp_avg_sqs must be empty"):
        op("adam_step_")(p, [torch.ones(2)], [torch.zeros(2)], [torch.zeros(2)], [torch.zeros(2)],
                         [torch.tensor(0.0)], lr=0.1, beta1=0.9, beta2=0.9, weight_decay=0.0, eps=1e-8,
                         amsgrad=False, maximize=False, decoupled_weight_decay=False)
    with pytest.raises(ValueError, match="Nesterov"):
        op("sgd_step_")(p, [torch.ones(2)], [torch.zeros(2)], lr=0.1, momentum=0.0, dampening=0.0,
                        weight_decay=0.0, nesterov=True, maximize=False, first_step=False)


def test_empty_lists_are_a_no_op():
    from fused_optim import functional as F

    out = F.adam_update([], [], [], [], 1)
    assert all(len(x) == 0 for x in out)


def test_large_and_empty_tensors_in_one_call():
    # Several chunks per tensor and a zero-element tensor, through the parallel path. lr is a power
    # of two, so lr * g is exact and both sides round once (p - lr g), with or without an FMA: the
    # kernel must agree bit for bit on every element, which catches any element done twice or not.
    params = [torch.randn(100_003), torch.empty(0), torch.randn(7)]
    grads = [torch.randn_like(p) for p in params]
    expected = [p - 0.25 * g for p, g in zip(params, grads)]
    op("sgd_step_")(params, grads, [], lr=0.25, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                    maximize=False, first_step=False)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p, e, rtol=0, atol=0)


def test_non_contiguous_tensors_are_updated_in_place():
    base = torch.randn(4, 6)
    view = base[:, ::2]  # not contiguous, not dense
    grad = torch.randn(4, 3)
    expected = view - 0.5 * grad  # 0.5 * grad is exact: one rounding on both sides, bit for bit
    op("sgd_step_")([view], [grad], [], lr=0.5, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                    maximize=False, first_step=False)
    torch.testing.assert_close(base[:, ::2], expected, rtol=0, atol=0)


def test_torch_compile_functional_op():
    case = _FIRST["adam_update"]
    lists = [[t.float() for t in lst] for lst in case.make()]
    fn = torch.compile(lambda *ls: op("adam_update")(*ls, **case.kwargs), backend="aot_eager", fullgraph=True)
    for got, want in zip(fn(*lists), op("adam_update")(*lists, **case.kwargs)):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


def _adam_args(n=2, size=3):
    return [[torch.ones(size) for _ in range(n)], [torch.ones(size) for _ in range(n)],
            [torch.zeros(size) for _ in range(n)], [torch.zeros(size) for _ in range(n)],
            [torch.tensor(0.0) for _ in range(n)]]


def _expanded(args):
    args[2][1] = torch.zeros(1).expand(3)  # stride 0: three elements, one memory location


def _transposed_twice(args):
    base = torch.ones(3, 3)
    args[0][:] = [base.t(), torch.ones(3, 3)]
    args[1][:] = [torch.ones(3, 3), torch.ones(3, 3)]
    args[2][:] = [base.t(), torch.zeros(3, 3)]  # the same non-contiguous view in two updated lists
    args[3][:] = [torch.zeros(3, 3), torch.zeros(3, 3)]


def _overlapping_views(args):
    base = torch.zeros(4)
    args[0][:] = [base[0:3], base[1:4]]


def _cross_index(args):
    args[2][0] = args[0][1]  # params[1] is also exp_avgs[0]


def _grad_overlaps_param(args):
    base = torch.ones(4)
    args[0][0], args[1][0] = base[1:], base[:3]


def _same_step_twice(args):
    args[4][1] = args[4][0]


@pytest.mark.parametrize("mutate, error, match", [
    (_expanded, ValueError, "share memory.*expanded"),
    (_transposed_twice, ValueError, r"params\[0\] shares memory with exp_avgs\[0\]"),
    (_overlapping_views, ValueError, r"params\[0\] shares memory with params\[1\]"),
    (_cross_index, ValueError, r"params\[1\] shares memory with exp_avgs\[0\]"),
    (_grad_overlaps_param, ValueError, "shares memory"),
    (_same_step_twice, ValueError, "same step counter"),
    (lambda a: a[4].__setitem__(0, torch.tensor(-1.0)), ValueError, "finite count"),
    (lambda a: a[4].__setitem__(0, torch.tensor(float("nan"))), ValueError, "finite count"),
    (lambda a: a[4].__setitem__(0, torch.tensor(2**31 - 1, dtype=torch.int32)), ValueError, "overflow"),
    (lambda a: a[4].__setitem__(1, torch.tensor([0.0]).to_sparse()), ValueError, "dense one-element"),
    (lambda a: a[4].__setitem__(1, torch.tensor(0.0, device="meta")), ValueError, "meta"),
    (lambda a: a[1].__setitem__(1, torch.ones(3, device="meta")), ValueError, "meta"),
])
def test_aliasing_and_bad_step_counters_are_rejected_before_any_update(mutate, error, match):
    # Each of these used to update silently with wrong numbers (aliased memory written twice or
    # read after it was written, a step counter incremented twice or to a NaN bias correction)
    # or to fail after part of the update had been written.
    args = _adam_args()
    mutate(args)
    _assert_rejected_untouched(args, error, match)


def test_interleaved_views_of_one_buffer_are_not_aliases():
    base = torch.zeros(4, 6)
    even, odd = base[:, ::2], base[:, 1::2]
    op("sgd_step_")([even, odd], [torch.ones(4, 3), torch.full((4, 3), 2.0)], [], lr=0.1, momentum=0.0,
                    dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False, first_step=False)
    assert base[0].tolist() == pytest.approx([-0.1, -0.2] * 3)


def _sgd_call(params, grads):
    called("sgd_step_")(params, grads, [], lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                    maximize=False, first_step=False)


def test_in_place_step_bumps_versions_so_autograd_sees_it():
    w = torch.ones(3, requires_grad=True)
    loss = (w * w).sum()  # saves w for backward
    with torch.no_grad():
        version = w._version
        _sgd_call([w], [torch.ones(3)])
    assert w._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_in_place_step_on_a_tensor_that_requires_grad_needs_no_grad():
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"requires grad.*no_grad"):
        _sgd_call([w], [torch.ones(3)])
    assert torch.equal(w.detach(), torch.ones(3))


def test_in_place_step_on_an_inference_tensor_outside_inference_mode():
    with torch.inference_mode():
        p = torch.ones(3)
    with pytest.raises(RuntimeError, match="inference tensor"):
        _sgd_call([p], [torch.ones(3)])
    with torch.inference_mode():
        _sgd_call([p], [torch.ones(3)])
    assert p.tolist() == pytest.approx([0.9] * 3)


def test_functional_op_mixing_meta_and_real_tensors_raises():
    # It used to return uninitialized memory (the meta fake ran for a CPU call).
    with pytest.raises(ValueError, match=r"grads\[0\] is on meta"):
        op("sgd_update")([torch.ones(3)], [torch.ones(3, device="meta")], [], lr=0.1, momentum=0.0,
                         dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False, first_step=False)
