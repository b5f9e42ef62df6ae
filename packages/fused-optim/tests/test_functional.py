"""The functional ops against the pure-PyTorch reference: values, first derivatives, named nodes,
finite meta-gradients at zero gradients, and the double-backward error."""

from __future__ import annotations

import pytest
import torch
from helpers import EMPTY, FUNCTIONAL_CASES, gradcheck_one_step, op, tolerances

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F
from fused_optim.ops import FUNCTIONAL_OPS, NodeInfo, apply_functional, describe_node

CASES = [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", CASES)
def test_values_match_reference(case, dtype):
    lists = case.make(dtype)
    before = [[t.clone() for t in lst] for lst in lists]
    ours = op(case.op)(*lists, **case.kwargs)
    ref = getattr(_reference, case.op)(*lists, **case.kwargs)
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **tolerances(dtype))
    for lst, old in zip(lists, before):  # inputs untouched: bit for bit
        for t, o in zip(lst, old):
            assert torch.equal(t, o)


@pytest.mark.parametrize("case", CASES)
def test_backward_matches_reference_autograd(case):
    lists = case.make(torch.float64)
    leaves = [[t.clone().requires_grad_() for t in lst] for lst in lists]
    flat = [t for lst in leaves for t in lst]
    ours = apply_functional(case.op, leaves, case.kwargs)
    ref = getattr(_reference, case.op)(*leaves, **case.kwargs)
    gen = torch.Generator().manual_seed(1)
    cotangents = [[torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in lst] for lst in ours]

    def grads(outputs):
        outs = [t for lst in outputs for t in lst]
        cots = [c for lst in cotangents for c in lst]
        return torch.autograd.grad(outs, flat, cots, allow_unused=True)

    for got, want, leaf in zip(grads(ours), grads(ref), flat):
        want = torch.zeros_like(leaf) if want is None else want
        got = torch.zeros_like(leaf) if got is None else got
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_gradcheck_one_step(case):
    assert gradcheck_one_step(case)


def _unroll(update, p0, weights, steps, **kwargs):
    """``steps`` differentiable updates where each gradient depends on the current params, so the
    meta-gradient flows through params and every state tensor across steps."""
    return update(p0, weights, steps, **kwargs)


def _multi_step_cases():
    def sgd(p, w, n):
        buf = None
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), buf = F.sgd_update([p], [g], buf, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)
        return p

    def adam(p, w, n, amsgrad=False, name="adam_update"):
        fn = getattr(F, name)
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        vmax = [torch.zeros_like(p)] if amsgrad else None
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (m,), (v,), vm = fn([p], [g], [m], [v], t + 1, lr=0.1, eps=1e-3, weight_decay=0.1,
                                      amsgrad=amsgrad, max_exp_avg_sqs=vmax)
            vmax = vm if amsgrad else None
        return p

    def direction(p, w, n):
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (d,), (m,), (v,) = F.adam_direction([g], [m], [v], t + 1, beta1=0.9, beta2=0.99, eps=1e-3,
                                                eps_root=1e-6)
            p = p - 0.1 * d
        return p

    def rmsprop(p, w, n):
        v, ga, buf = torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (v,), (ga,), (buf,) = F.rmsprop_update([p], [g], [v], grad_avgs=[ga], momentum_buffers=[buf],
                                                         lr=0.01, eps=1e-2, momentum=0.5, centered=True)
        return p

    def adagrad(p, w, n):
        s = torch.full_like(p, 0.1)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (s,) = F.adagrad_update([p], [g], [s], t + 1, lr=0.1, lr_decay=0.01, eps=1e-3)
        return p

    def adadelta(p, w, n):
        v, u = torch.zeros_like(p), torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (v,), (u,) = F.adadelta_update([p], [g], [v], [u], lr=1.0, eps=1e-3, weight_decay=0.1)
        return p

    def adamax(p, w, n):
        m, u = torch.zeros_like(p), torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (m,), (u,) = F.adamax_update([p], [g], [m], [u], t + 1, lr=0.05, eps=1e-3)
        return p

    def radam(p, w, n):
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (m,), (v,) = F.radam_update([p], [g], [m], [v], t + 1, lr=0.05, eps=1e-3, weight_decay=0.1,
                                              decoupled_weight_decay=True)
        return p

    def adamw_amsgrad(p, w, n):
        return adam(p, w, n, amsgrad=True, name="adamw_update")

    def lion(p, w, n):
        # sign() has no derivative: the meta-gradient reaches p0 through the decay and w through
        # the momentum, whose value the next step's sign reads (without a derivative) -- so the
        # loss also reads the momentum, or w would have no gradient at all.
        m = torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (m,) = F.lion_update([p], [g], [m], lr=0.05, weight_decay=0.5)
        return p + m

    def adan(p, w, n, no_prox=False):
        m, v, s, prev = (torch.zeros_like(p) for _ in range(4))
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (m,), (v,), (s,), (prev,) = F.adan_update([p], [g], [m], [v], [s], [prev], t + 1, lr=0.05,
                                                            eps=1e-3, weight_decay=0.1, no_prox=no_prox)
        return p

    def adan_no_prox(p, w, n):
        return adan(p, w, n, no_prox=True)

    def nadam(p, w, n, decoupled=False):
        m, v, product = torch.zeros_like(p), torch.zeros_like(p), 1.0
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (m,), (v,), product = F.nadam_update([p], [g], [m], [v], t + 1, product, lr=0.05, eps=1e-3,
                                                       weight_decay=0.1, decoupled_weight_decay=decoupled)
        return p

    def nadamw(p, w, n):
        return nadam(p, w, n, decoupled=True)

    def rprop(p, w, n):
        # The step depends on the gradient only through signs: the meta-gradient flows through the
        # params and the step sizes (a tensor lr seeds them, and the clamp bounds them).
        prev, size = torch.zeros_like(p), (w[0] * 0.01).clone()
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (prev,), (size,) = F.rprop_update([p], [g], [prev], [size], etaplus=1.5, step_size_max=0.014)
        return p + prev * w[-1]  # prev carries the (kept) gradient: its derivative is checked too

    def asgd(p, w, n):
        ax = torch.zeros_like(p)
        for t in range(n):
            g = torch.sin(p) * w[t]
            (p,), (ax,) = F.asgd_update([p], [g], [ax], 0.1, 1.0 if t == 0 else 1.0 / t, lambd=0.05,
                                        weight_decay=0.1)
        return p + ax

    return [sgd, adam, adamw_amsgrad, direction, rmsprop, adagrad, adadelta, adamax, radam, lion, adan, adan_no_prox,
            nadam, nadamw, rprop, asgd]


@pytest.mark.parametrize("unrolled", _multi_step_cases(), ids=lambda f: f.__name__)
def test_gradcheck_through_state_over_steps(unrolled):
    # RAdam needs 6 steps to leave its un-rectified warm-up (rho_t > 5 from step 4 with beta2=0.999).
    steps = 6 if unrolled.__name__ == "radam" else 3
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(4, generator=gen, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(steps, 4, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda p, w: unrolled(p, w, steps), (p0, w), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_node_names():
    p = torch.ones(2, requires_grad=True)
    z = torch.zeros(2)
    assert F.adam_update([p], [p * 1], [z], [z], 1).params[0].grad_fn.name() == "FusedAdamBackward"
    assert F.adamw_update([p], [p * 1], [z], [z], 1).params[0].grad_fn.name() == "FusedAdamWBackward"
    assert F.sgd_update([p], [p * 1], lr=0.1).params[0].grad_fn.name() == "FusedSGDBackward"
    d, _, _ = F.adam_direction([p * 1], [z], [z], 1, beta1=0.9, beta2=0.999, eps=1e-8)
    assert d[0].grad_fn.name() == "FusedAdamDirectionBackward"
    assert F.rmsprop_update([p], [p * 1], [z]).params[0].grad_fn.name() == "FusedRMSpropBackward"
    assert F.radam_update([p], [p * 1], [z], [z], 1).params[0].grad_fn.name() == "FusedRAdamBackward"
    assert F.nadam_update([p], [p * 1], [z], [z], 1, 1.0).params[0].grad_fn.name() == "FusedNAdamBackward"
    assert F.nadam_update([p], [p * 1], [z], [z], 1, 1.0, weight_decay=0.1,
                          decoupled_weight_decay=True).params[0].grad_fn.name() == "FusedNAdamWBackward"
    assert F.rprop_update([p], [p * 1], [z], [z + 0.1]).params[0].grad_fn.name() == "FusedRpropBackward"
    assert F.asgd_update([p], [p * 1], [z], 0.1, 1.0).params[0].grad_fn.name() == "FusedASGDBackward"
    # One node per call, whatever the number of tensors.
    q = [torch.ones(3, requires_grad=True) for _ in range(5)]
    out = F.adagrad_update(q, [t * 2 for t in q], [torch.zeros(3)] * 5, 1).params
    assert len({t.grad_fn for t in out}) == 1


@pytest.mark.parametrize("name", sorted(FUNCTIONAL_OPS))
def test_describe_node_names_the_update_whatever_the_call_path(name):
    case = next(c for c in FUNCTIONAL_CASES if c.op == name)
    lists = [[t.double().requires_grad_() for t in lst] for lst in case.make()]
    spec = FUNCTIONAL_OPS[name]
    optimizer = spec.node.removeprefix("Fused").removesuffix("Direction")
    expected = NodeInfo(spec.node, optimizer, name, "direction" if "direction" in name else "update")
    raw = op(name)(*lists, **case.kwargs)[0][0]
    functional = apply_functional(name, lists, case.kwargs)[0][0]
    assert describe_node(raw.grad_fn) == expected
    assert describe_node(functional.grad_fn) == expected
    assert describe_node((raw * 2).grad_fn) is None
    assert describe_node(raw.sum().grad_fn.next_functions[0][0]) == expected


def test_describe_node_of_the_aliases():
    p = torch.ones(2, requires_grad=True)
    z = torch.zeros(2)
    info = describe_node(F.adamw_update([p], [p * 1], [z], [z], 1).params[0].grad_fn)
    assert info == NodeInfo("FusedAdamW", "AdamW", "adam_update", "update")
    d, _, _ = F.adam_direction([p * 1], [z], [z], 1, beta1=0.9, beta2=0.999, eps=1e-8)
    assert describe_node(d[0].grad_fn) == NodeInfo("FusedAdamDirection", "Adam", "adam_direction", "direction")
    assert describe_node(None) is None and describe_node(object()) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_outputs_are_fresh_contiguous_tensors_like_the_params(dtype):
    # The op allocates every output itself (torch.ops path: through torch's C shim): each is a new
    # tensor of its parameter's shape, dtype and device, with the strides torch.empty gives that
    # shape, whatever the inputs' layout (a transposed matrix, zero-size dimensions, a scalar).
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(4, 3, generator=gen).t(), torch.randn(0), torch.randn(2, 0, 3), torch.randn(()),
              torch.randn(5, 1, 2, generator=gen)]
    params = [p.to(dtype) for p in params]
    lists = [params] + [[torch.rand(p.shape, generator=gen).to(dtype) for p in params] for _ in range(3)]
    raw = op("adam_update")(*lists, [], step=2, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8,
                            amsgrad=False, maximize=False, decoupled_weight_decay=False)
    api = F.adam_update(*lists, 2, lr=0.1, betas=(0.9, 0.99))
    for out in (raw, api):
        for new_list in out[:3]:
            for new, p, *old in zip(new_list, params, *lists[1:]):
                assert (new.shape, new.dtype, new.device) == (p.shape, p.dtype, p.device)
                assert new.stride() == torch.empty(p.shape).stride()
                assert all(new.numel() == 0 or new.data_ptr() != x.data_ptr() for x in (p, *old))


def test_no_graph_without_requires_grad():
    z = torch.zeros(2)
    out = F.adam_update([torch.ones(2)], [torch.ones(2)], [z], [z], 1)
    assert out.params[0].grad_fn is None and not out.params[0].requires_grad


def test_adam_direction_zero_gradient_is_finite_and_exact():
    # Dead units: g == 0 with zero state. The pure-autograd formula gives NaN (0 * inf through the
    # square root); the exact limit is d(direction)/dg = (1 - b1) / (bc1 * eps), and 0 through v.
    b1, b2, eps = 0.9, 0.999, 1e-8
    g = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    m = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    v = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (d,), _, _ = F.adam_direction([g], [m], [v], 1, beta1=b1, beta2=b2, eps=eps)
    dg, dm, dv = torch.autograd.grad(d.sum(), (g, m, v))
    bc1 = 1 - b1
    torch.testing.assert_close(dg, torch.full_like(g, (1 - b1) / (bc1 * eps)), rtol=1e-12, atol=0)
    torch.testing.assert_close(dm, torch.full_like(m, b1 / (bc1 * eps)), rtol=1e-12, atol=0)
    assert torch.equal(dv, torch.zeros_like(v))  # the limit the backward writes: exactly 0
    # The reference autograd shows the bug we avoid.
    (dr,), _, _ = _reference.adam_direction([g], [m], [v], step=1, beta1=b1, beta2=b2, eps=eps, eps_root=0.0)
    assert torch.isnan(torch.autograd.grad(dr.sum(), g)[0]).all()


@pytest.mark.parametrize("name", ["adam_update", "adamw_update", "radam_update", "rmsprop_update",
                                  "adagrad_update", "adamax_update", "adadelta_update", "adan_update",
                                  "nadam_update"])
def test_meta_gradient_finite_with_dead_units(name):
    # A two-step unroll where half of the gradient entries are exactly zero at every step.
    p0 = torch.tensor([0.5, -1.0, 2.0, 0.3], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    fn = getattr(F, name)
    p = p0
    states = None
    for t in range(1, 4):
        g = torch.sin(p) * mask
        z = torch.zeros_like(p)
        if name in ("adam_update", "adamw_update", "radam_update", "adamax_update"):
            states = states or [[z], [z]]
            out = fn([p], [g], *states, t + 5 if name == "radam_update" else t)
        elif name == "nadam_update":
            states = states or [[z], [z], 1.0]
            out = fn([p], [g], *states[:2], t, states[2])
        elif name == "adagrad_update":
            states = states or [[z]]
            out = fn([p], [g], *states, t)
        elif name == "adan_update":
            states = states or [[z], [z], [z], [z]]
            out = fn([p], [g], *states, t)
        elif name == "adadelta_update":
            states = states or [[z], [z]]
            out = fn([p], [g], *states)
        else:
            states = states or [[z]]
            out = fn([p], [g], *states)
        p = out.params[0]
        states = [x if isinstance(x, float) else list(x) for x in out[1:] if isinstance(x, float) or len(x)]
    (meta,) = torch.autograd.grad((p * p).sum(), p0)
    assert torch.isfinite(meta).all()
    # Dead coordinates only feel AdamW's decoupled decay p <- c p (c = 1 - lr wd, default
    # lr=1e-3, wd=1e-2), so their meta-gradient is exactly d(p_3^2)/dp0 = 2 c^6 p0.
    c = 1 - 1e-3 * 1e-2 if name == "adamw_update" else 1.0
    torch.testing.assert_close(meta[1::2], 2 * c**6 * p0.detach()[1::2], rtol=1e-12, atol=0)


def test_double_backward_raises_clear_error():
    p = torch.ones(2, dtype=torch.float64, requires_grad=True)
    z = torch.zeros(2, dtype=torch.float64)
    new = F.adam_update([p], [p * p], [z], [z], 1, eps=1e-3).params[0]
    (g,) = torch.autograd.grad(new.sum(), p, create_graph=True)
    with pytest.raises(RuntimeError, match=r"differentiate twice|not itself differentiable"):
        torch.autograd.grad(g.sum(), p)


def test_raw_op_autograd_matches_named_node():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update")
    lists = [[t.clone().requires_grad_() for t in lst] for lst in case.make()]
    raw = op("adam_update")(*lists, **case.kwargs)
    named = apply_functional("adam_update", lists, case.kwargs)
    flat = [t for lst in lists for t in lst]
    a = torch.autograd.grad(sum(t.sum() for t in raw[0]), flat, allow_unused=True)
    b = torch.autograd.grad(sum(t.sum() for t in named[0]), flat, allow_unused=True)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)


def test_raw_op_double_backward_raises():
    p = torch.ones(2, dtype=torch.float64, requires_grad=True)
    z = torch.zeros(2, dtype=torch.float64)
    (new,), *_ = op("adagrad_update")([p], [p * p], [z], step=1, lr=0.1, lr_decay=0.0, weight_decay=0.0,
                                      eps=1e-3, maximize=False)
    (g,) = torch.autograd.grad(new.sum(), p, create_graph=True)
    with pytest.raises(RuntimeError, match=r"not itself differentiable|does not require grad"):
        torch.autograd.grad(g.sum(), p)


@pytest.mark.parametrize("bad, error, match", [
    (dict(step=0), ValueError, "step"),
    (dict(step=1.5), TypeError, "step"),
    (dict(lr=-1.0), ValueError, "learning rate"),
    (dict(betas=(1.0, 0.9)), ValueError, "beta1"),
    (dict(eps=-1e-8), ValueError, "epsilon"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay"),
])
def test_bad_hyper_parameters(bad, error, match):
    kwargs = dict(step=1, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    kwargs.update(bad)
    step = kwargs.pop("step")
    z = torch.zeros(2)
    with pytest.raises(error, match=match):
        F.adam_update([torch.ones(2)], [torch.ones(2)], [z], [z], step, **kwargs)


def test_functional_rejects_bad_lists():
    with pytest.raises(TypeError, match="list of tensors"):
        F.adam_update(torch.ones(2), [torch.ones(2)], [torch.zeros(2)], [torch.zeros(2)], 1)
    with pytest.raises(ValueError, match="shape"):
        F.adam_update([torch.ones(2)], [torch.ones(3)], [torch.zeros(2)], [torch.zeros(2)], 1)
    with pytest.raises(TypeError, match="requires grad"):
        F.sgd_update([torch.ones(2)], [torch.ones(2)], lr=torch.tensor(0.1, requires_grad=True))


def test_every_functional_op_has_a_case():
    assert {c.op for c in FUNCTIONAL_CASES} == set(FUNCTIONAL_OPS)
    assert all(k != EMPTY for c in FUNCTIONAL_CASES for k in c.kinds[:2])
    assert fused_optim.functional is F
