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


@pytest.fixture(params=["torch.ops", "unboxed"])
def any_kept(request, monkeypatch):
    """Each kind of kept step: through torch.ops (what a torch other than the build's gets) and the
    fast path's unboxed one (_native.UnboxedKeptStep)."""
    if request.param == "torch.ops":
        monkeypatch.setitem(_native.BUILD_INFO, "eager", False)
    elif not _eager:
        pytest.skip("no fast path under this torch")
    return request.param


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
def test_kept_steps_follow_torch_with_two_groups_and_a_changing_lr(any_kept, name, kwargs):
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


def test_kept_lists_are_freed_with_their_owner(any_kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params)
    [step] = _kept_steps(opt)
    kept_id = step.id
    del step
    opt.load_state_dict(opt.state_dict())  # new state objects: the next step gathers afresh
    opt.step()
    gc.collect()
    kept_step = torch.ops.fused_optim.kept_step_ if any_kept == "torch.ops" else _native.EAGER["kept_step_"]
    with pytest.raises(ValueError, match=f"no kept step has id {kept_id}"):
        kept_step(kept_id, [p.grad for p in params], lr=0.01)


def test_an_unknown_kept_step_is_named():
    with pytest.raises(ValueError, match="kept_step_: no kept step has id -5"):
        torch.ops.fused_optim.kept_step_(-5, [torch.zeros(2)], lr=0.1)
    with pytest.raises(ValueError, match="kept_free: no kept step has id -5"):
        torch.ops.fused_optim.kept_free(-5)


def test_a_deep_copy_steps_its_own_parameters(any_kept):
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


def test_kept_steps_bump_versions_and_refuse_inference_gradients_they_write(any_kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params)
    versions = [p._version for p in params]
    state_versions = [opt.state[p]["exp_avg"]._version for p in params]
    grad_versions = [p.grad._version for p in params]
    opt.step()
    assert all(p._version > v for p, v in zip(params, versions))
    assert all(opt.state[p]["exp_avg"]._version > v for p, v in zip(params, state_versions))
    assert [p.grad._version for p in params] == grad_versions  # only read without a grad_scale
    with torch.inference_mode():
        inference_grad = torch.ones(5, dtype=torch.float64)
    params[2].grad = inference_grad
    # Only read: accepted, as torch.optim and the fast path accept it
    ref_params = [p.detach().clone().requires_grad_() for p in params]
    ref = torch.optim.Adam(ref_params, lr=0.01)
    ref.load_state_dict(copy.deepcopy(opt.state_dict()))  # (not sharing the state tensors)
    for r, p in zip(ref_params, params):
        r.grad = p.grad.clone()
    opt.step()
    ref.step()
    torch.testing.assert_close([p.detach() for p in params], [r.detach() for r in ref_params], rtol=1e-12, atol=1e-14)
    # Unscaled in place by a grad_scale: refused, before anything is written
    before = [p.detach().clone() for p in params]
    with pytest.raises(RuntimeError, match=r"grads\[2\] is an inference tensor"):
        opt.step(grad_scale=torch.tensor(2.0), found_inf=torch.tensor(0.0))
    torch.testing.assert_close([p.detach() for p in params], before, rtol=0, atol=0)


@pytest.mark.parametrize("skip", [False, True])
def test_kept_steps_take_amp_arguments(any_kept, skip):
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


# --- kept tables (kept::KeptTable): the table of a kept StepInPlace call, run again -----------------

from fused_optim import _C  # noqa: E402


def _table_steps():
    return _C._kept_table_steps()


def _set_grads(params, step, scale=1.0):
    for p, g in zip(params, _grads(params, step)):
        p.grad = g * scale


def _step_both(ref, ours, ref_params, our_params, steps):
    """``steps`` steps of both optimizers on the same gradients; returns how many of ours ran a kept
    table."""
    before = _table_steps()
    for step in range(steps):
        for ps, opt in ((ref_params, ref), (our_params, ours)):
            _set_grads(ps, step)
            opt.step()
    return _table_steps() - before


@pytest.mark.parametrize("name, kwargs", [
    ("Adam", dict(lr=0.01)), ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)), ("AdamW", dict(lr=0.01)),
    ("Adagrad", dict(lr=0.1)), ("Adadelta", dict(lr=0.5)), ("Adamax", dict(lr=0.01)), ("RAdam", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)), ("Rprop", dict(lr=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)), ("SGD", dict(lr=0.05, weight_decay=0.1)),
    # state scalars (mu_product; eta, mu and ASGD's step count), read and advanced by the kernel
    ("NAdam", dict(lr=0.01, momentum_decay=0.01, decoupled_weight_decay=True, weight_decay=0.1)),
    ("ASGD", dict(lr=0.02, t0=2, weight_decay=0.1)),
])
def test_kept_tables_run_the_steps_after_the_first_kept_one(any_kept, name, kwargs):
    ref_params, our_params = _params(), _params()
    ref = getattr(torch.optim, name)(ref_params, **kwargs)
    ours = getattr(fused_optim, name)(our_params, **kwargs)
    ran = []
    for step in range(7):
        for ps in (ref_params, our_params):
            _set_grads(ps, step)
        ref.step()
        before = _table_steps()
        ours.step()
        ran.append(_table_steps() - before)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    # The first steps gather (and create the state), the next keeps the call and its table, and
    # every step after runs the table
    assert ran[0] == 0 and ran[-4:] == [1, 1, 1, 1]


def test_a_kept_table_follows_tensors_replaced_in_place(any_kept):
    ref_params, our_params = _params(), _params()
    ref, ours = torch.optim.Adam(ref_params, lr=0.01), fused_optim.Adam(our_params, lr=0.01)

    def both(step, change=None):
        for ps, opt in ((ref_params, ref), (our_params, ours)):
            _set_grads(ps, step)
            if change is not None:
                change(ps, opt)
            opt.step()
        for a, b in zip(ref_params, our_params):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)

    for step in range(3):
        both(step)
    before = _table_steps()
    # New memory behind the same objects: the table's pointers are stale, the full path runs
    both(3, lambda ps, opt: setattr(ps[1], "data", ps[1].data.clone()))
    both(4, lambda ps, opt: setattr(opt.state[ps[0]]["exp_avg"], "data", opt.state[ps[0]]["exp_avg"].data.clone()))
    assert _table_steps() == before
    both(5)  # (kept afresh by the full path)
    both(6)
    assert _table_steps() - before == 2


def test_a_kept_table_refuses_a_parameter_made_another_dtype(any_kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params, steps=4)
    params[0].data = params[0].data.float()
    params[0].grad = torch.ones(3)
    before = [p.detach().clone() for p in params]
    with pytest.raises(TypeError, match=r"mixed dtypes|has dtype"):
        opt.step()
    for p, b in zip(params, before):
        assert torch.equal(p.detach().double(), b.double())


def test_gradients_a_kept_table_cannot_take_go_the_full_path(any_kept):
    shapes = ((3,), (2, 4), (5,))
    ref_params, our_params = _params(shapes=shapes), _params(shapes=shapes)
    ref, ours = torch.optim.Adam(ref_params, lr=0.01), fused_optim.Adam(our_params, lr=0.01)
    for step in range(3):
        for ps, opt in ((ref_params, ref), (our_params, ours)):
            _set_grads(ps, step)
            opt.step()
    before = _table_steps()
    # a strided gradient (the full path stages a dense copy): still the same numbers
    for ps, opt in ((ref_params, ref), (our_params, ours)):
        _set_grads(ps, 3)
        ps[1].grad = torch.randn(4, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64).t()
        opt.step()
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert _table_steps() == before
    # wrong gradients are named by the full path, with nothing written
    snapshot = [p.detach().clone() for p in our_params]
    steps = [ours.state[p]["step"].item() for p in our_params]
    # (A gradient of another shape or dtype, torch refuses to assign.)
    bad = {"memory of a parameter": lambda: our_params[1].detach(),
           "memory of a state": lambda: ours.state[our_params[1]]["exp_avg_sq"]}
    for what, grad in bad.items():
        _set_grads(our_params, 4)
        our_params[1].grad = grad()
        with pytest.raises(ValueError, match=r"grads\[1\] shares memory with|shares memory with grads\[1\]"):
            ours.step()
        for p, s in zip(our_params, snapshot):
            assert torch.equal(p.detach(), s), what
        assert [ours.state[p]["step"].item() for p in our_params] == steps, what
    # and the table still runs the next good step
    for ps, opt in ((ref_params, ref), (our_params, ours)):
        _set_grads(ps, 5)
        opt.step()
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert _table_steps() == before + 1


def test_a_kept_table_checks_the_step_counters(any_kept):
    params = _params()
    opt = fused_optim.Adam(params, lr=0.01)
    _warm(opt, params, steps=4)
    opt.state[params[2]]["step"].fill_(-1.0)
    before = [p.detach().clone() for p in params]
    with pytest.raises(ValueError, match=r"state_steps\[2\] is -1.*finite count >= 0"):
        opt.step()
    for p, b in zip(params, before):
        assert torch.equal(p.detach(), b)
    assert [opt.state[p]["step"].item() for p in params] == [4.0, 4.0, -1.0]


@pytest.mark.parametrize("skip", [False, True])
def test_a_kept_table_takes_amp_arguments(any_kept, skip):
    ref_params, our_params = _params(), _params()
    ref = torch.optim.Adam(ref_params, lr=0.01)
    ours = fused_optim.Adam(our_params, lr=0.01)
    for step in range(5):
        if step == 3:
            before = _table_steps()
        _set_grads(ref_params, step)
        _set_grads(our_params, step, scale=8.0)
        found_inf = skip and step == 4
        if not found_inf:
            ref.step()
        ours.step(grad_scale=torch.tensor(8.0), found_inf=torch.tensor(float(found_inf)))
        if not found_inf:  # the gradients are left unscaled, as torch's fused optimizers leave them
            torch.testing.assert_close([p.grad for p in our_params], [p.grad for p in ref_params], rtol=1e-15, atol=0)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert [ours.state[p]["step"].item() for p in our_params] == [4.0 if skip else 5.0] * 3
    assert _table_steps() - before == (1 if skip else 2)  # steps 4 and 5 ran the table (a skip returns first)


def test_a_kept_table_runs_the_emulated_cuda_launch(any_kept):
    # The CUDA kernels' path (emulated on the host) from a kept table, as a GPU step takes it
    ref_params, our_params = _params(shapes=((3000,), (5,), (4100,))), _params(shapes=((3000,), (5,), (4100,)))
    ref, ours = torch.optim.Adam(ref_params, lr=0.01), fused_optim.Adam(our_params, lr=0.01, capturable=False)
    previous = _C._emulate_cuda(True)
    try:
        launches, before = _C._emulated_launches(), _table_steps()
        for step in range(5):
            for ps, opt in ((ref_params, ref), (our_params, ours)):
                _set_grads(ps, step)
                opt.step()
        assert _table_steps() - before == 2 and _C._emulated_launches() - launches == 5  # steps 4 and 5
    finally:
        _C._emulate_cuda(previous)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def test_a_kept_capturable_table_advances_the_counters_in_the_kernel(any_kept):
    as_built, kept_params = _params(), _params()
    ours = fused_optim.Adam(kept_params, lr=0.01, capturable=True)
    before = _table_steps()
    for step in range(5):
        _set_grads(kept_params, step)
        ours.step()
    assert _table_steps() - before == 2  # steps 4 and 5
    _native.BUILD_INFO["eager"] = _eager  # the same optimizer as built (the test's monkeypatch restores)
    twin = fused_optim.Adam(as_built, lr=0.01, capturable=True)
    for step in range(5):
        _set_grads(as_built, step)
        twin.step()
    for a, b in zip(as_built, kept_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert [ours.state[p]["step"].item() for p in kept_params] == [5.0] * 3


@pytest.mark.parametrize("seed", range(6))
def test_kept_tables_follow_torch_through_random_changes(any_kept, seed):
    # Steps interleaved with what users do between steps, each of which a kept table must notice
    # or survive: lr changes, a gradient left None, memory replaced in place (a parameter's, a
    # state's), a strided gradient, GradScaler's arguments, a state reloaded, a parameter frozen.
    rng = torch.Generator().manual_seed(seed)
    shapes = ((6,), (3, 4), (5,), (2, 3))
    ref_params, our_params = _params(seed, shapes), _params(seed, shapes)
    kwargs = dict(lr=0.01, weight_decay=0.05, amsgrad=bool(seed % 2))
    ref, ours = torch.optim.AdamW(ref_params, **kwargs), fused_optim.AdamW(our_params, **kwargs)
    changes = ["none", "lr", "no grad", "param data", "state data", "strided grad", "amp", "reload"]
    before = _table_steps()
    for step in range(24):
        pick = int(torch.randint(2 * len(changes), (1,), generator=rng))  # half of the steps: no change
        change = changes[pick] if step > 3 and pick < len(changes) else "none"
        grads = _grads(ref_params, step)
        for ps in (ref_params, our_params):
            for p, g in zip(ps, grads):
                p.grad = g.clone()
        k = int(torch.randint(len(shapes), (1,), generator=rng))
        if change == "lr":
            for opt in (ref, ours):
                opt.param_groups[0]["lr"] *= 0.7
        elif change == "no grad":
            ref_params[k].grad = our_params[k].grad = None
        elif change == "param data":
            for ps in (ref_params, our_params):
                ps[k].data = ps[k].data.clone()
        elif change == "state data":
            for ps, opt in ((ref_params, ref), (our_params, ours)):
                if ps[k] in opt.state:
                    opt.state[ps[k]]["exp_avg_sq"].data = opt.state[ps[k]]["exp_avg_sq"].data.clone()
        elif change == "strided grad" and our_params[k].dim() == 2:
            for ps in (ref_params, our_params):
                ps[k].grad = grads[k].t().contiguous().t()
        elif change == "reload":
            ours.load_state_dict(copy.deepcopy(ours.state_dict()))
        if change == "amp":
            for p in our_params:
                if p.grad is not None:
                    p.grad = p.grad * 4.0
            ours.step(grad_scale=torch.tensor(4.0), found_inf=torch.tensor(0.0))
        else:
            ours.step()
        ref.step()
        for a, b in zip(ref_params, our_params):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14,
                                       msg=lambda m, where=f"step {step} ({change})": f"{where}: {m}")
    assert _table_steps() - before >= 2  # the kept tables ran between the changes


@pytest.mark.parametrize("name", ["Adam", "SGD"])
def test_a_gradient_gone_none_or_sparse_after_the_keep_takes_the_full_path(any_kept, name):
    # No Python pass over the gradients looks for them first: the kept call declines (unboxed) or
    # refuses (torch.ops) before writing anything, and the full path then skips a None gradient or
    # hands a sparse one to torch (SGD) or names it (Adam) as torch.optim does.
    kwargs = dict(lr=0.05, momentum=0.9) if name == "SGD" else dict(lr=0.01)
    ref_params, our_params = _params(), _params()
    ref, ours = getattr(torch.optim, name)(ref_params, **kwargs), getattr(fused_optim, name)(our_params, **kwargs)
    _warm(ref, ref_params)
    _warm(ours, our_params)
    assert _kept_steps(ours)
    for ps in (ref_params, our_params):
        for p, g in zip(ps, _grads(ps, 7)):
            p.grad = g
        ps[1].grad = None
    ref.step()
    ours.step()
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    for ps in (ref_params, our_params):
        for p, g in zip(ps, _grads(ps, 8)):
            p.grad = g
        ps[2].grad = ps[2].grad.to_sparse()
    before = [p.detach().clone() for p in our_params]
    if name == "Adam":
        with pytest.raises(RuntimeError, match="Adam does not support sparse gradients"):
            ours.step()
        for a, b in zip(before, our_params):
            assert torch.equal(a, b.detach())
        return
    ref.step()
    ours.step()
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name, key, bad, match", [
    ("NAdam", "mu_product", float("inf"), r"mu_products\[1\] is inf; it must be finite"),
    ("ASGD", "eta", float("nan"), r"etas\[1\] is nan; it must be finite"),
    ("ASGD", "step", -1.0, r"state_steps\[1\] is -1"),
    ("Adam", "step", -3.0, r"state_steps\[1\] is -3"),  # a capturable one: the kernel advances it
])
def test_a_kept_table_checks_the_state_scalars_it_reads_in_place(any_kept, name, key, bad, match):
    # A value the full path refuses, written into a state tensor in place (no fingerprint changes)
    # between two steps on the kept table: named as the full path names it, nothing written.
    kwargs = dict(lr=0.01, capturable=True) if name == "Adam" else dict(lr=0.01)
    params = _params()
    opt = getattr(fused_optim, name)(params, **kwargs)
    before = _table_steps()
    for step in range(5):
        _set_grads(params, step)
        opt.step()
    assert _table_steps() - before == 2
    opt.state[params[1]][key].fill_(bad)
    snapshot = [p.detach().clone() for p in params]
    _set_grads(params, 5)
    with pytest.raises(ValueError, match=match):
        opt.step()
    for p, s in zip(params, snapshot):
        assert torch.equal(p.detach(), s)


@pytest.mark.parametrize("name, columns, tables", [("NAdam", 0b1, 3), ("ASGD", 0b111, 3), ("ASGD", 0b100, 0)],
                         ids=["NAdam-mu_product", "ASGD-all", "ASGD-split"])
def test_state_scalars_the_host_advances_on_a_kept_table(any_kept, name, columns, tables):
    # NAdam's mu_product kept on the CPU beside CUDA parameters (torch.optim's default) is read and
    # advanced by the host (emulated here: the state columns treated as off the parameters'
    # device): a kept table reads and advances it through kept pointers, and the steps follow
    # torch. A tensor whose state is split (ASGD's step on the host, eta and mu with the kernel)
    # keeps no table: the host's share would need the device's values.
    kwargs = dict(lr=0.02, t0=2) if name == "ASGD" else dict(lr=0.01)
    ref_params, our_params = _params(), _params()
    ref, ours = getattr(torch.optim, name)(ref_params, **kwargs), getattr(fused_optim, name)(our_params, **kwargs)
    previous = torch.ops.fused_optim._state_scalars_on_host(columns)
    try:
        assert _step_both(ref, ours, ref_params, our_params, 6) == tables
    finally:
        torch.ops.fused_optim._state_scalars_on_host(previous)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    for a, b in zip(ref.state.values(), ours.state.values()):
        for key, value in a.items():
            torch.testing.assert_close(b[key], value, rtol=1e-12, atol=1e-14, msg=key)


@pytest.mark.parametrize("name, kwargs", [("ASGD", dict(lr=0.02, t0=2)), ("NAdam", dict(lr=0.01))])
def test_a_kept_table_with_state_scalars_runs_the_emulated_cuda_launch(any_kept, name, kwargs):
    # The CUDA path (emulated): the state scalars advanced by the advance kernel after the launch.
    shapes = ((3000,), (5,), (4100,))
    ref_params, our_params = _params(shapes=shapes), _params(shapes=shapes)
    ref, ours = getattr(torch.optim, name)(ref_params, **kwargs), getattr(fused_optim, name)(our_params, **kwargs)
    previous = _C._emulate_cuda(True)
    try:
        assert _step_both(ref, ours, ref_params, our_params, 6) == 3
    finally:
        _C._emulate_cuda(previous)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def test_gradients_that_never_fit_do_not_rebuild_the_table(any_kept):
    # Strided gradients on every step take the full path (which stages them) but leave the kept
    # table as it was: no table built afresh per step, and the next dense step runs the table.
    ref_params, our_params = _params(shapes=((3, 4), (5,))), _params(shapes=((3, 4), (5,)))
    ref, ours = torch.optim.Adam(ref_params, lr=0.01), fused_optim.Adam(our_params, lr=0.01)
    _step_both(ref, ours, ref_params, our_params, 4)
    keeps, steps = _C._kept_table_keeps(), _table_steps()
    for step in range(4, 8):
        for ps, opt in ((ref_params, ref), (our_params, ours)):
            _set_grads(ps, step)
            ps[0].grad = ps[0].grad.t().contiguous().t()
            opt.step()
    assert _C._kept_table_keeps() == keeps and _table_steps() == steps
    for ps, opt in ((ref_params, ref), (our_params, ours)):
        _set_grads(ps, 8)
        opt.step()
    assert _table_steps() == steps + 1 and _C._kept_table_keeps() == keeps
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def test_a_default_dtype_change_takes_the_full_path_with_state_scalars(any_kept):
    # ASGD stores eta and mu as tensors of torch's default dtype would hold them: a change of the
    # default between steps must reach a kept table's rounding, as it reaches torch.optim's.
    ref_params, our_params = _params(), _params()
    ref, ours = torch.optim.ASGD(ref_params, lr=0.05, t0=1), fused_optim.ASGD(our_params, lr=0.05, t0=1)
    _step_both(ref, ours, ref_params, our_params, 4)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if previous == torch.float32 else torch.float32)
    try:
        keeps, steps = _C._kept_table_keeps(), _table_steps()
        for step in range(4, 7):
            for ps, opt in ((ref_params, ref), (our_params, ours)):
                _set_grads(ps, step)
                opt.step()
        assert _C._kept_table_keeps() == keeps + 1 and _table_steps() == steps + 2  # kept afresh once
    finally:
        torch.set_default_dtype(previous)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    for a, b in zip(ref.state.values(), ours.state.values()):
        for key in ("eta", "mu"):
            assert torch.equal(b[key], a[key]), key
