"""Kept steps (csrc/kept_step.h, _native.KeptStep): without the fast path the step reuse keeps each
group's op call on the C++ side and then passes only the gradients, lr and AMP arguments. Checked
against the same optimizer as built and against torch.optim; the kept lists are freed with their
owner, never shared with a copy, and the in-place refusals and version bumps still happen."""

from __future__ import annotations

import copy
import gc

import pytest
import torch

import fused_optim
from fused_optim import _native


@pytest.fixture
def kept(monkeypatch):
    monkeypatch.setitem(_native.BUILD_INFO, "eager", False)  # what a torch other than the build's gets


def _params(seed=0, shapes=((3,), (2, 4), (5,))):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


def _grads(params, step):
    gen = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]


def _warm(opt, params, steps=3):
    """A few steps, after which the step reuse keeps its calls."""
    for step in range(steps):
        for p, g in zip(params, _grads(params, step)):
            p.grad = g
        opt.step()


def _kept_steps(opt):
    gathered = opt.__dict__.get("_gathered")
    return [k for k in (gathered.kept or []) if k is not None] if gathered is not None else []


@pytest.mark.parametrize("name, kwargs", [("Adam", dict(lr=0.01, weight_decay=0.1)), ("SGD", dict(lr=0.05, momentum=0.9)),
                                          ("Adagrad", dict(lr=0.1)), ("ASGD", dict(lr=0.02, t0=2)),
                                          ("RMSprop", dict(lr=0.01, centered=True))])
def test_kept_steps_follow_torch_with_two_groups_and_a_changing_lr(kept, name, kwargs):
    ref_params, our_params = _params(), _params()
    groups = lambda ps: [{"params": ps[:2]}, {"params": ps[2:], "lr": kwargs["lr"] / 2}]  # noqa: E731
    ref = getattr(torch.optim, name)(groups(ref_params), **kwargs)
    ours = getattr(fused_optim, name)(groups(our_params), **kwargs)
    for step in range(6):
        for ps in (ref_params, our_params):
            for p, g in zip(ps, _grads(ps, step)):
                p.grad = g
        if step == 3:  # a scheduler's change: the kept calls take each step's lr
            for opt in (ref, ours):
                opt.param_groups[0]["lr"] *= 0.5
        ref.step()
        ours.step()
        for a, b in zip(ref_params, our_params):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert len(_kept_steps(ours)) == 2  # one per group: the kept path ran


def test_a_kept_step_passes_only_the_gradients(kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    names = {e.name for e in prof.events()}
    assert "fused_optim::kept_step_" in names and "fused_optim::adam_step_" not in names


def test_kept_lists_are_freed_with_their_owner(kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params)
    [step] = _kept_steps(opt)
    kept_id = step.id
    del step
    opt.load_state_dict(opt.state_dict())  # new state objects: the next step gathers afresh
    opt.step()
    gc.collect()
    with pytest.raises(ValueError, match=f"no kept step has id {kept_id}"):
        torch.ops.fused_optim.kept_step_(kept_id, [p.grad for p in params], lr=0.01)


def test_an_unknown_kept_step_is_named():
    with pytest.raises(ValueError, match="kept_step_: no kept step has id -5"):
        torch.ops.fused_optim.kept_step_(-5, [torch.zeros(2)], lr=0.1)
    with pytest.raises(ValueError, match="kept_free: no kept step has id -5"):
        torch.ops.fused_optim.kept_free(-5)


def test_a_deep_copy_steps_its_own_parameters(kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.1)
    _warm(opt, params)
    assert _kept_steps(opt)
    before = [p.detach().clone() for p in params]
    twin = copy.deepcopy(opt)
    twin_params = twin.param_groups[0]["params"]
    for p in twin_params:
        p.grad = torch.ones_like(p)
    twin.step()  # must write the copy's parameters, not the original's kept ones
    for p, b in zip(params, before):
        torch.testing.assert_close(p.detach(), b, rtol=0, atol=0)
    assert all(not torch.equal(p.detach(), b) for p, b in zip(twin_params, before))


def test_kept_steps_bump_versions_and_refuse_inference_gradients(kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params)
    versions = [p._version for p in params]
    state_versions = [opt.state[p]["exp_avg"]._version for p in params]
    opt.step()
    assert all(p._version > v for p, v in zip(params, versions))
    assert all(opt.state[p]["exp_avg"]._version > v for p, v in zip(params, state_versions))
    with torch.inference_mode():
        inference_grad = torch.ones(5, dtype=torch.float64)
    params[2].grad = inference_grad
    with pytest.raises(RuntimeError, match=r"grads\[2\] is an inference tensor"):
        opt.step()


@pytest.mark.parametrize("skip", [False, True])
def test_kept_steps_take_amp_arguments(kept, skip):
    # GradScaler's arguments reach the kept call: unscaled as the kernels read them, or skipped.
    results = []
    for path in ("kept", "as built"):
        params = _params()
        opt = fused_optim.Adam(params, lr=0.01)
        for step in range(4):
            for p, g in zip(params, _grads(params, step)):
                p.grad = g * 4.0
            found_inf = torch.tensor(1.0 if skip and step == 3 else 0.0)
            if path == "as built":
                _native.BUILD_INFO["eager"] = _eager
            opt.step(grad_scale=torch.tensor(4.0), found_inf=found_inf)
        results.append([p.detach().clone() for p in params])
        if path == "kept":
            assert _kept_steps(opt)
    torch.testing.assert_close(results[0], results[1], rtol=1e-12, atol=1e-14)


_eager = _native.BUILD_INFO["eager"]  # as imported, before any test's monkeypatch
