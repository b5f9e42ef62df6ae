"""The eager runner of the differentiable functional ops (ops._make_runner) against the general path.

The runner is apply_functional's path for eager calls that need a gradient: one C++ pass over
the lists (_native.flatten_lists), a cached plan per call structure, positional hyper-parameters and
the node's C++ apply. It must give exactly what the general path (ops._apply_node, which
torch.compile and torch.func take) gives, raise the same errors, and hand anything unusual to
the general path.
"""

from __future__ import annotations

import pytest
import torch
from helpers import FUNCTIONAL_CASES, FunctionalCase, SeenOps

import fused_optim.functional as F
from fused_optim import _native, ops

# The C++ helpers and plans of the fast path, which exists only under the torch it was compiled
# against (fused_optim._native); without it the runner takes its general path, tested here too.
needs_fast_path = pytest.mark.skipif(not _native.BUILD_INFO["eager"], reason=f"no fast path: {_native.EAGER_REASON}")


class _Subclass(torch.Tensor):
    pass


class _ListSubclass(list):  # not a list to the C++ pass: the general path's
    pass


def _leaves(case: FunctionalCase, dtype: torch.dtype = torch.float64) -> list[list[torch.Tensor]]:
    return [[t.requires_grad_() for t in lst] for lst in case.make(dtype, shapes=[(3,), (2, 2)])]


def _general(case: FunctionalCase, lists: list[list[torch.Tensor]]) -> tuple[list[torch.Tensor], ...]:
    spec = ops.FUNCTIONAL_OPS[case.op]
    return ops._apply_node(ops._NODES[spec.node], spec, lists, case.kwargs)


def _grads(outputs: tuple[list[torch.Tensor], ...], lists: list[list[torch.Tensor]]) -> list[torch.Tensor | None]:
    gen = torch.Generator().manual_seed(1)
    loss = sum((t * torch.randn(t.shape, generator=gen, dtype=t.dtype)).sum() for out in outputs for t in out)
    return list(torch.autograd.grad(loss, [t for lst in lists for t in lst], allow_unused=True))


@needs_fast_path
def test_flatten_lists_one_pass():
    a, b = torch.ones(2), torch.zeros(3, requires_grad=True)
    flat, sizes, needs_grad = _native.flatten_lists([[a], (b, a), []])
    assert flat == (a, b, a) and sizes == (1, 2, 0) and needs_grad is True
    assert _native.flatten_lists(([a], [a]))[2] is False
    with torch.no_grad():
        assert _native.flatten_lists([[b]])[2] is False  # no gradient is recorded without grad mode
    assert _native.flatten_lists([[torch.nn.Parameter(torch.ones(1))]]) is not None
    # Anything else is the general path's: other containers, non-tensors, subclasses.
    for odd in ([a], [[a], a], [[a, 1.0]], [[a], iter([a])], [[a], {a}], [[a.as_subclass(_Subclass)]],
                [_ListSubclass([a])]):
        assert _native.flatten_lists(odd) is None


@needs_fast_path
def test_split_flat():
    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    assert _native.split_flat((a, b, c), (1, 0, 2)) == ([a], [], [b, c])
    assert _native.split_flat((), ()) == ()
    with pytest.raises(ValueError, match="lengths"):
        _native.split_flat((a, b), (1,))
    with pytest.raises(ValueError, match="lengths"):
        _native.split_flat((a,), (2,))
    with pytest.raises(TypeError, match="two tuples"):
        _native.split_flat([a], (1,))


@pytest.mark.parametrize("case", FUNCTIONAL_CASES, ids=lambda c: c.id)
def test_runner_equals_the_general_path(case: FunctionalCase):
    # Both paths run the same forward and backward kernels: bit for bit.
    lists = _leaves(case)
    ours = ops.apply_functional(case.op, lists, case.kwargs)
    general = _general(case, lists)
    assert [len(x) for x in ours] == [len(x) for x in general]
    for x, y in zip(ours, general):
        for a, b in zip(x, y):
            assert torch.equal(a, b)
            assert ops.describe_node(a.grad_fn) == ops.describe_node(b.grad_fn)
    for a, b in zip(_grads(ours, lists), _grads(general, lists)):
        assert (a is None and b is None) or torch.equal(a, b)


def test_runner_takes_tuples_and_other_sequences():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update")
    lists = _leaves(case)
    expected = ops.apply_functional(case.op, lists, case.kwargs)
    for variant in (tuple(tuple(x) for x in lists), [list(x) for x in lists], [_ListSubclass(x) for x in lists]):
        got = ops.apply_functional(case.op, variant, case.kwargs)
        assert all(torch.equal(a, b) for x, y in zip(got, expected) for a, b in zip(x, y))
        assert got[0][0].grad_fn is not None




def test_runner_keyword_mistakes_raise_the_ops_error():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update")
    lists = _leaves(case)
    missing = {k: v for k, v in case.kwargs.items() if k != "beta2"}
    with pytest.raises(RuntimeError, match="beta2"):
        ops.apply_functional(case.op, lists, missing)
    with pytest.raises(RuntimeError, match="at most"):  # an extra keyword is an error, not ignored
        ops.apply_functional(case.op, lists, {**case.kwargs, "unknown": 1.0})
    with pytest.raises(ValueError, match="does not run"):
        ops.apply_functional("sgd_update", lists, case.kwargs, node="FusedAdamW")


@pytest.mark.parametrize("mistake, error, match", [
    ("shape", ValueError, "shape"),
    ("dtype", (TypeError, ValueError), "dtype"),
    ("length", ValueError, "tensors"),
    ("device", (ValueError, RuntimeError, NotImplementedError), "meta|device"),
])
def test_bad_tensors_needing_a_gradient_raise_clear_errors(mistake, error, match):
    g = [torch.randn(4, dtype=torch.float64, requires_grad=True)]
    m, v = [torch.zeros(4, dtype=torch.float64)], [torch.zeros(4, dtype=torch.float64)]
    if mistake == "shape":
        m = [torch.zeros(5, dtype=torch.float64)]
    elif mistake == "dtype":
        m = [torch.zeros(4, dtype=torch.float32)]
    elif mistake == "length":
        v = v * 2
    else:
        v = [torch.zeros(4, dtype=torch.float64, device="meta")]
    before = [t.clone() for t in g + m]
    with pytest.raises(error, match=match):
        F.adam_direction(g, m, v, 1, beta1=0.9, beta2=0.999, eps=1e-8)
    assert all(torch.equal(a, b) for a, b in zip(g + m, before))


def test_bad_hyper_parameters_with_a_gradient_raise_clear_errors():
    g = [torch.randn(4, requires_grad=True)]
    z = [torch.zeros(4)]
    with pytest.raises(ValueError, match="beta1"):
        F.adam_direction(g, z, z, 1, beta1=1.5, beta2=0.999, eps=1e-8)
    with pytest.raises(ValueError, match="step"):
        F.adam_direction(g, z, z, 0, beta1=0.9, beta2=0.999, eps=1e-8)
    with pytest.raises(TypeError, match="real number"):
        F.adam_direction(g, z, z, 1, beta1="0.9", beta2=0.999, eps=1e-8)
    with pytest.raises(TypeError, match="list of tensors"):
        F.adam_direction(g[0], z, z, 1, beta1=0.9, beta2=0.999, eps=1e-8)


def test_saved_inputs_modified_in_place_are_caught():
    g = torch.randn(3, requires_grad=True)
    m = torch.zeros(3)
    d, _, _ = F.adam_direction([g * 1], [m], [torch.zeros(3)], 1, beta1=0.9, beta2=0.999, eps=1e-8)
    m.add_(1.0)  # a saved input changed after the forward: the backward must refuse
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(d[0].sum(), g)


def test_runner_under_a_mode_and_the_profiler_falls_back_inside_the_node():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_direction")
    lists = _leaves(case)
    expected = ops.apply_functional(case.op, lists, case.kwargs)
    expected_grads = _grads(expected, lists)
    with SeenOps() as mode:
        got = ops.apply_functional(case.op, lists, case.kwargs)
        got_grads = _grads(got, lists)
    assert torch.ops.fused_optim.adam_direction.default in mode.seen
    assert torch.ops.fused_optim.adam_direction_backward.default in mode.seen
    with torch.profiler.profile() as prof:
        profiled = ops.apply_functional(case.op, lists, case.kwargs)
        profiled_grads = _grads(profiled, lists)
    names = {e.name for e in prof.events()}
    assert {"fused_optim::adam_direction", "fused_optim::adam_direction_backward"} <= names
    for out in (got, profiled):
        assert all(torch.equal(a, b) for x, y in zip(out, expected) for a, b in zip(x, y))
    for grads in (got_grads, profiled_grads):
        assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads))


def test_a_tensor_escaping_a_transform_is_unwrapped():
    p = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    escaped = []

    def f(x):
        escaped.append(x)  # a functorch wrapper, dead once grad returns
        return (x * x).sum()

    torch.func.grad(f)(p)
    assert _native.flatten_lists([[escaped[0]]]) is None  # the general path unwraps it
    z = [torch.zeros(2, dtype=torch.float64)]
    d, _, _ = F.adam_direction([escaped[0]], z, z, 1, beta1=0.9, beta2=0.999, eps=1e-3)
    (grad,) = torch.autograd.grad(d[0].sum(), p)
    dd, _, _ = F.adam_direction([p], z, z, 1, beta1=0.9, beta2=0.999, eps=1e-3)
    (expected,) = torch.autograd.grad(dd[0].sum(), p)
    torch.testing.assert_close(grad, expected, rtol=0, atol=0)  # the same kernels on the same values


@needs_fast_path
def test_plans_are_cached_per_call_structure():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "rmsprop_update")
    runner = ops._RUNNERS.get((case.op, None)) or ops._make_runner(case.op, None)
    plans = next(c.cell_contents for c in runner.__closure__ if isinstance(c.cell_contents, dict)
                 and all(isinstance(p, ops._Plan) for p in c.cell_contents.values()))
    plans.clear()
    lists = _leaves(case)
    runner(lists, case.kwargs)
    runner(_leaves(case), case.kwargs)
    assert len(plans) == 1
    # Output lists that depend on the hyper-parameters (RMSprop's centered averages) get a plan each.
    other = dict(case.kwargs, centered=not case.kwargs["centered"])
    grad_avgs = [[t.detach().abs().requires_grad_() for t in lists[2]]] if other["centered"] else [[]]
    runner([*lists[:3], *grad_avgs, lists[4]], other)
    assert len(plans) == 2


@pytest.mark.parametrize("case", [c for c in FUNCTIONAL_CASES if c.op in ("adam_direction", "sgd_update")],
                         ids=lambda c: c.id)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_list_arguments_are_checked_by_name(case: FunctionalCase, requires_grad: bool):
    lists = case.make(torch.float64)
    if requires_grad:
        lists = [[t.requires_grad_() for t in x] for x in lists]
    name = ops.FUNCTIONAL_OPS[case.op].inputs[1]
    with pytest.raises(TypeError, match=f"{name} must be a list of tensors, got a single tensor"):
        ops.apply_functional(case.op, [lists[0], lists[1][0], *lists[2:]], case.kwargs)
    with pytest.raises(TypeError, match=rf"{name}\[1\] must be a tensor, got float"):
        ops.apply_functional(case.op, [lists[0], [lists[1][0], 1.0], *lists[2:]], case.kwargs)
    with pytest.raises(TypeError, match=f"{name} must be a list of tensors, got int"):
        ops.apply_functional(case.op, [lists[0], 3, *lists[2:]], case.kwargs)
    with pytest.raises(TypeError, match=f"takes {len(lists)} lists of tensors"):
        ops.apply_functional(case.op, [*lists, lists[0]], case.kwargs)
    with pytest.raises(TypeError, match=f"takes {len(lists)} lists of tensors"):
        ops.apply_functional(case.op, lists[:-1], case.kwargs)


def test_public_functions_name_the_bad_list():
    z = [torch.zeros(2)]
    with pytest.raises(TypeError, match="exp_avg_sqs must be a list of tensors, got a single tensor"):
        F.adam_direction(z, z, torch.zeros(2), 1, beta1=0.9, beta2=0.999, eps=1e-8)
    with pytest.raises(TypeError, match=r"grads\[0\] must be a tensor, got str"):
        F.adam_update(z, ["x"], z, z, 1)
    with pytest.raises(TypeError, match="step_sizes must be a list of tensors, got NoneType"):
        F.rprop_update(z, z, z, None)


def test_the_node_shows_its_hyper_parameters_by_name_on_either_path():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update")
    lists = _leaves(case)
    for out in (ops.apply_functional(case.op, lists, case.kwargs), _general(case, lists)):
        assert out[0][0].grad_fn.kwargs == case.kwargs
