"""fused_optim.Muon against torch.optim.Muon (every option, both dtypes, state_dicts both ways),
its rejections, the batched Newton-Schulz against the SVD's polar factor, and the differentiable
muon_update (float64 gradcheck through the iteration)."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import fused_optim
from fused_optim import ops
from fused_optim.functional import muon_update

# Several matrices of each shape (the batches), square, tall and wide, not grouped by shape.
SHAPES = [(8, 8), (12, 4), (8, 8), (4, 12), (12, 4), (8, 8)]
LR = 0.02
# The Newton-Schulz iteration runs in bfloat16 in both optimizers, whose matrix-product kernels
# (batched against one at a time) may round differently on another CPU: a bfloat16 rounding of an
# update (|O| < 1, relative 2^-8) moves a parameter by under lr * scale * 2^-8 per step. Ten steps
# stay far below 1e-3, while a wrong factor (scale, decay, direction) moves them by ~lr.
PARAM_TOL = dict(rtol=0.0, atol=1e-3)
# The momentum buffers do not depend on the iteration: float tolerances.
BUFFER_TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12)}

OPTIONS = [
    dict(),  # torch's defaults: nesterov, weight_decay 0.1, 5 steps, the original lr adjustment
    dict(nesterov=False, weight_decay=0.0),
    dict(adjust_lr_fn="original", momentum=0.3),
    dict(adjust_lr_fn="match_rms_adamw", weight_decay=0.05),
    dict(ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5), eps=1e-3),
    dict(ns_steps=0, nesterov=False, momentum=0.0),
]


def _params(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]


def _set_grads(pairs, gen):
    for a, b in pairs:
        g = torch.randn(a.shape, generator=gen, dtype=a.dtype)
        a.grad, b.grad = g.clone(), g.clone()


def _assert_close(torch_opt, ours, a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(y, x, **PARAM_TOL)
        torch.testing.assert_close(ours.state[y]["momentum_buffer"], torch_opt.state[x]["momentum_buffer"],
                                   **BUFFER_TOL[x.dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_ten_steps_match_torch(options, dtype):
    a = [torch.nn.Parameter(p) for p in _params(dtype)]
    b = [torch.nn.Parameter(p.clone()) for p in a]
    torch_opt, ours = torch.optim.Muon(a, lr=LR, **options), fused_optim.Muon(b, lr=LR, **options)
    gen = torch.Generator().manual_seed(1)
    start = [p.detach().clone() for p in a]
    for _ in range(10):
        _set_grads(zip(a, b), gen)
        torch_opt.step()
        ours.step()
    _assert_close(torch_opt, ours, a, b)
    assert all((p - s).abs().max() > 1e-2 for p, s in zip(b, start))  # the steps did move every matrix


@pytest.mark.parametrize("direction", ["torch_to_ours", "ours_to_torch"])
def test_state_dict_moves_both_ways(direction):
    a = [torch.nn.Parameter(p) for p in _params(torch.float32)]
    b = [torch.nn.Parameter(p.clone()) for p in a]
    first, second = (torch.optim.Muon, fused_optim.Muon) if direction == "torch_to_ours" else (
        fused_optim.Muon, torch.optim.Muon)
    gen = torch.Generator().manual_seed(2)
    opt_a = first(a, lr=LR, weight_decay=0.05, adjust_lr_fn="match_rms_adamw")
    for _ in range(3):
        _set_grads(zip(a, b), gen)
        opt_a.step()
    with torch.no_grad():
        for x, y in zip(a, b):
            y.copy_(x)
    opt_b = second(b, lr=LR)  # the options come with the state_dict
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))  # (its tensors are opt_a's own)
    assert opt_b.param_groups[0]["adjust_lr_fn"] == "match_rms_adamw"
    for _ in range(3):
        _set_grads(zip(a, b), gen)
        opt_a.step()
        opt_b.step()
    torch_opt, ours = (opt_a, opt_b) if first is torch.optim.Muon else (opt_b, opt_a)
    ta, tb = (a, b) if first is torch.optim.Muon else (b, a)
    _assert_close(torch_opt, ours, ta, tb)
    assert set(opt_b.state_dict()["state"][0]) == {"momentum_buffer"}


def test_non_matrices_are_rejected_as_torch_rejects_them():
    with pytest.raises(ValueError, match="matrices only"):
        fused_optim.Muon([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match="matrices only"):
        fused_optim.Muon([{"params": [torch.nn.Parameter(torch.zeros(2, 2, 2))]}])
    with pytest.raises(ValueError):  # and torch too
        torch.optim.Muon([torch.nn.Parameter(torch.zeros(3))])


def _group_after_a_vector(**options):
    """A matrix and, added later (torch's constructor check does not see it), a vector."""
    w, v = torch.nn.Parameter(torch.ones(2, 2)), torch.nn.Parameter(torch.ones(3))
    opt = fused_optim.Muon([w], lr=LR, **options)
    opt.add_param_group({"params": [v]})
    w.grad, v.grad = torch.ones(2, 2), torch.ones(3)
    return opt, w, v


def test_a_bad_call_changes_nothing():
    opt, w, v = _group_after_a_vector()
    with pytest.raises(ValueError, match="matrices only"):
        opt.step()
    assert torch.equal(w.detach(), torch.ones(2, 2)) and torch.equal(v.detach(), torch.ones(3))
    assert all(float(s["momentum_buffer"].abs().sum()) == 0 for s in opt.state.values())
    w = torch.nn.Parameter(torch.ones(2, 2))
    for bad, match in ((dict(ns_steps=100), "ns_steps"), (dict(ns_coefficients=(1.0, 2.0)), "ns_coefficients")):
        opt = fused_optim.Muon([w], lr=LR, **bad)
        w.grad = torch.ones(2, 2)
        with pytest.raises(ValueError, match=match):
            opt.step()
        assert torch.equal(w.detach(), torch.ones(2, 2))


def test_complex_and_sparse_are_rejected():
    z = torch.nn.Parameter(torch.ones(2, 2, dtype=torch.complex64))
    opt = fused_optim.Muon([z])
    z.grad = torch.ones_like(z)
    with pytest.raises(RuntimeError, match="complex"):
        opt.step()
    w = torch.nn.Parameter(torch.ones(2, 2))
    opt = fused_optim.Muon([w])
    w.grad = torch.eye(2).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()
    assert torch.equal(w.detach(), torch.ones(2, 2))


def test_one_batched_chain_per_shape():
    params = [torch.nn.Parameter(p) for p in _params(torch.float32)]
    opt = fused_optim.Muon(params)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()  # creates the state
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    counts = {e.key: e.count for e in prof.key_averages()}
    # 3 shapes x 5 iterations: one Gram product each, then two baddbmm; no per-matrix products,
    # no value read on the host.
    assert counts.get("aten::bmm") == 15 and counts.get("aten::baddbmm") == 30
    assert "aten::mm" not in counts and "aten::addmm" not in counts
    assert not {"aten::item", "aten::_local_scalar_dense"} & set(counts)
    assert counts.get("fused_optim::muon_direction_", 0) <= 2  # (checked, then run: one call each)


@pytest.mark.parametrize("shape", [(6, 6), (9, 4), (4, 9)])
def test_newton_schulz_converges_to_the_polar_factor(shape):
    # With (a, b, c) = (1.5, -0.5, 0) the iteration is the cubic Newton-Schulz, which takes every
    # singular value in (0, sqrt(3)) to 1: the limit is U V^T of the SVD, each matrix its own.
    gen = torch.Generator().manual_seed(3)
    batch = torch.randn(3, *shape, generator=gen, dtype=torch.float64)
    got = ops.newton_schulz(batch, (1.5, -0.5, 0.0), 60, 1e-7, dtype=None)
    u, _, vh = torch.linalg.svd(batch, full_matrices=False)
    torch.testing.assert_close(got, u @ vh, rtol=0, atol=1e-9)


def test_lr_scale_follows_torch_s_rules():
    assert ops.muon_lr_scale((32, 8), None) == ops.muon_lr_scale((32, 8), "original") == 2.0
    assert ops.muon_lr_scale((8, 32), None) == 1.0
    assert ops.muon_lr_scale((8, 32), "match_rms_adamw") == pytest.approx(0.2 * 32**0.5)
    with pytest.raises(ValueError, match="adjust_lr_fn"):
        ops.muon_lr_scale((8, 8), "other")


def _muon_inputs(seed=4):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(3, 3), (4, 2), (3, 3)]
    return [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(3)]


def test_muon_update_gradcheck_float64():
    kwargs = dict(lr=0.1, weight_decay=0.1, momentum=0.9, ns_steps=2, ns_dtype=None)
    flat = [t.requires_grad_() for t in itertools.chain(*_muon_inputs())]

    def fn(*flat):
        params, grads, bufs = flat[:3], flat[3:6], flat[6:]
        out = muon_update(params, grads, bufs, **kwargs)
        return (*out.params, *out.momentum_buffers)

    assert torch.autograd.gradcheck(fn, flat)
    out = muon_update(*_muon_inputs(), **kwargs)
    assert out.momentum_buffers[0].grad_fn is None  # inputs without grad


def test_muon_update_is_the_class_step():
    params, grads, bufs = _muon_inputs(5)
    for options in OPTIONS:
        out = muon_update(params, grads, bufs, lr=LR, **options)
        ws = [torch.nn.Parameter(p.clone()) for p in params]
        opt = fused_optim.Muon(ws, lr=LR, **options)
        for w, g, b in zip(ws, grads, bufs):
            w.grad = g
            opt.state[w]["momentum_buffer"] = b.clone()
        opt.step()
        for w, p, b in zip(ws, out.params, out.momentum_buffers):
            torch.testing.assert_close(p, w.detach(), **PARAM_TOL)
            torch.testing.assert_close(b, opt.state[w]["momentum_buffer"], **BUFFER_TOL[torch.float64])


def test_muon_update_rejects_what_the_class_rejects():
    params, grads, bufs = _muon_inputs()
    with pytest.raises(ValueError, match="matrices only"):
        muon_update([torch.zeros(3)], [torch.zeros(3)], [torch.zeros(3)])
    with pytest.raises(ValueError, match="learning rate"):
        muon_update(params, grads, bufs, lr=-1.0)
    with pytest.raises(ValueError, match="momentum"):
        muon_update(params, grads, bufs, momentum=-0.5)
    with pytest.raises(ValueError, match="adjust_lr_fn"):
        muon_update(params, grads, bufs, adjust_lr_fn="other")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or not fused_optim.BUILD_INFO["cuda"],
                    reason="needs a CUDA device and a CUDA build")
@pytest.mark.parametrize("options", OPTIONS[:2], ids=["defaults", "plain-momentum"])
def test_ten_steps_match_torch_on_cuda(options):
    # The fused direction and apply kernels on the GPU, and the batched iteration in cuBLAS,
    # against torch.optim.Muon on the same device (ci/gpu_check.sh runs the `cuda` mark)
    a = [torch.nn.Parameter(p.cuda()) for p in _params(torch.float32)]
    b = [torch.nn.Parameter(p.clone()) for p in a]
    torch_opt, ours = torch.optim.Muon(a, lr=LR, **options), fused_optim.Muon(b, lr=LR, **options)
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        for x, y in zip(a, b):
            g = torch.randn(x.shape, generator=gen).cuda()
            x.grad, y.grad = g.clone(), g.clone()
        torch_opt.step()
        ours.step()
    _assert_close(torch_opt, ours, a, b)
