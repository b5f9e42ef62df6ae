"""The drop-in optimizers against their twins (torch.optim's class; for Lion and Adan, the pure-PyTorch
one in fused_optim._reference, see tests/twins.py): every option combination for 20+ steps on several
shapes, state_dict round trips both ways, param groups, closures, schedulers, dtypes, complex and
sparse gradients, NaN/inf propagation."""

# ruff: noqa: B023  (closures run within the loop iteration that defines them)
from __future__ import annotations

import copy
import itertools
from typing import ClassVar

import pytest
import torch
import twins
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from twins import RESEARCH, TOL, as_params, research_configs, twin

import fused_optim
from fused_optim.optim import _common


def _configs():
    out = []
    for momentum, nesterov, dampening, wd, maximize in itertools.product(
            [0.0, 0.9], [False, True], [0.0, 0.2], [0.0, 0.05], [False, True]):
        if nesterov and (momentum == 0 or dampening != 0):
            continue
        if momentum == 0 and dampening != 0:
            continue
        out.append(("SGD", dict(lr=0.05, momentum=momentum, nesterov=nesterov, dampening=dampening,
                                weight_decay=wd, maximize=maximize)))
    for amsgrad, wd, decoupled, maximize in itertools.product([False, True], [0.0, 0.1], [False, True],
                                                              [False, True]):
        if wd == 0 and decoupled:
            continue
        out.append(("Adam", dict(lr=0.01, amsgrad=amsgrad, weight_decay=wd, decoupled_weight_decay=decoupled,
                                 maximize=maximize)))
    for amsgrad, wd, maximize in itertools.product([False, True], [0.0, 0.1], [False, True]):
        out.append(("AdamW", dict(lr=0.01, amsgrad=amsgrad, weight_decay=wd, maximize=maximize)))
    for centered, momentum, wd, maximize in itertools.product([False, True], [0.0, 0.9], [0.0, 0.1],
                                                              [False, True]):
        out.append(("RMSprop", dict(lr=0.01, centered=centered, momentum=momentum, weight_decay=wd,
                                    maximize=maximize)))
    for lr_decay, wd, init, maximize in itertools.product([0.0, 0.01], [0.0, 0.1], [0.0, 0.1], [False, True]):
        out.append(("Adagrad", dict(lr=0.1, lr_decay=lr_decay, weight_decay=wd, initial_accumulator_value=init,
                                    maximize=maximize)))
    for rho, wd, maximize in itertools.product([0.9, 0.5], [0.0, 0.1], [False, True]):
        out.append(("Adadelta", dict(lr=1.0, rho=rho, weight_decay=wd, maximize=maximize)))
    for wd, maximize in itertools.product([0.0, 0.1], [False, True]):
        out.append(("Adamax", dict(lr=0.02, weight_decay=wd, maximize=maximize)))
    for wd, decoupled, maximize in itertools.product([0.0, 0.1], [False, True], [False, True]):
        if wd == 0 and decoupled:
            continue
        out.append(("RAdam", dict(lr=0.01, weight_decay=wd, decoupled_weight_decay=decoupled, maximize=maximize)))
    # torch's own NAdam, Rprop and ASGD test configurations (common_optimizers.py), then every
    # combination of their options.
    for wd, momentum_decay, decoupled, maximize, lr in itertools.product(
            [0.0, 0.1], [4e-3, 6e-3], [False, True], [False, True], [2e-3, 1e-3]):
        if wd == 0 and decoupled:
            continue
        out.append(("NAdam", dict(lr=lr, weight_decay=wd, momentum_decay=momentum_decay,
                                  decoupled_weight_decay=decoupled, maximize=maximize)))
    for lr, etas, step_sizes, maximize in itertools.product(
            [1e-2, 2e-4], [(0.5, 1.2), (0.5, 1.5)], [(1e-6, 50), (2e-6, 100), (1e-3, 0.02)], [False, True]):
        out.append(("Rprop", dict(lr=lr, etas=etas, step_sizes=step_sizes, maximize=maximize)))
    for lambd, lr, t0, wd, maximize in itertools.product([1e-4, 0.1], [1e-2, 0.02], [1e6, 100, 5], [0.0, 0.1],
                                                         [False, True]):
        out.append(("ASGD", dict(lr=lr, lambd=lambd, t0=t0, weight_decay=wd, maximize=maximize)))
    # torch's Adafactor configurations, then combinations (eps1 None: the dtype's epsilon).
    for lr, wd, maximize, beta2_decay, d, eps in itertools.product(
            [1e-2, 1e-3], [0.0, 0.1], [False, True], [-0.8, -1.0], [1.0, 1.5], [(None, 1e-3), (1e-20, 1e-2)]):
        out.append(("Adafactor", dict(lr=lr, weight_decay=wd, maximize=maximize, beta2_decay=beta2_decay, d=d,
                                      eps=eps)))
    return out + research_configs()


CONFIGS = as_params(_configs())


def _assert_state_close(ref, ours, tol):
    rs, os_ = ref.state_dict(), ours.state_dict()
    assert rs["param_groups"] == os_["param_groups"]
    assert rs["state"].keys() == os_["state"].keys()
    for k in rs["state"]:
        assert list(rs["state"][k]) == list(os_["state"][k])  # the same keys, in the same order
        for key, a in rs["state"][k].items():
            b = os_["state"][k][key]
            if a is None:
                assert b is None
            else:
                assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
                torch.testing.assert_close(b, a, **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_matches_its_twin(name, kwargs, dtype):
    ref, ours, ref_params, our_params = twins.run_both(name, kwargs, dtype)
    tol = dict(TOL[dtype])
    if dtype == torch.float32 and kwargs.get("centered"):
        # sqrt(v - grad_avg^2) cancels, amplifying last-bit differences (torch's vectorized lerp
        # rounds once through an FMA, the portable kernel twice) about tenfold.
        tol["atol"] = 5e-6
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, **tol)
    _assert_state_close(ref, ours, tol)


NAMES = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "RAdam", "NAdam", "Rprop", "ASGD",
         "Adafactor"]
RICH = {"SGD": dict(lr=0.05, momentum=0.9), "Adam": dict(lr=0.01, amsgrad=True), "AdamW": dict(lr=0.01),
        "RMSprop": dict(lr=0.01, centered=True, momentum=0.5), "Adagrad": dict(lr=0.1, lr_decay=0.01),
        "Adadelta": dict(), "Adamax": dict(lr=0.02), "RAdam": dict(lr=0.01),
        "NAdam": dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
        "Rprop": dict(lr=0.01, etas=(0.4, 1.5)), "ASGD": dict(lr=0.05, t0=2, weight_decay=0.1),
        "Adafactor": dict(lr=0.05, weight_decay=0.1, d=1.5),
        "Lion": dict(lr=0.01, weight_decay=0.1), "Adan": dict(lr=0.01, weight_decay=0.02)}
ALL = NAMES + RESEARCH  # every drop-in class


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("direction", ["twin->ours", "ours->twin"])
def test_state_dict_round_trip(name, direction):
    kwargs = RICH[name]
    src_cls, dst_cls = ((twin(name), getattr(fused_optim, name)) if direction == "twin->ours"
                        else (getattr(fused_optim, name), twin(name)))
    params = twins.params(torch.float64)
    opt = src_cls(params, **kwargs)
    for step in range(5):
        for p, g in zip(params, twins.grads(params, step)):
            p.grad = g
        opt.step()
    # Continue from the checkpoint with both classes: same numbers.
    cont = {}
    for label, cls in (("src", src_cls), ("dst", dst_cls)):
        ps = [p.detach().clone().requires_grad_() for p in params]
        o = cls(ps, **kwargs)
        o.load_state_dict(copy.deepcopy(opt.state_dict()))
        for step in range(5, 10):
            for p, g in zip(ps, twins.grads(ps, step)):
                p.grad = g
            o.step()
        cont[label] = (o, ps)
    for a, b in zip(cont["src"][1], cont["dst"][1]):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    _assert_state_close(cont["src"][0], cont["dst"][0], dict(rtol=1e-12, atol=1e-14))


def _torch_steps_an_added_group(name):
    # Older torch (2.11 and earlier at least) creates Adagrad's state only in __init__, so its own
    # Adagrad fails (KeyError 'sum') on a group added later; there is no reference to compare with.
    p = torch.zeros(1, requires_grad=True)
    opt = twin(name)([torch.zeros(1, requires_grad=True)], lr=0.1)
    opt.add_param_group({"params": [p]})
    p.grad = torch.ones(1)
    try:
        opt.step()
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("name", ALL)
def test_param_groups_add_param_group_closure_and_scheduler(name):
    if not _torch_steps_an_added_group(name):
        pytest.skip(f"torch {torch.__version__}'s {name} cannot step a param group added after construction")
    def build(cls):
        torch.manual_seed(0)
        a = torch.randn(4, dtype=torch.float64, requires_grad=True)
        b = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
        c = torch.randn(5, dtype=torch.float64, requires_grad=True)
        opt = cls([{"params": [a]}, {"params": [b], "lr": 0.003}], lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        return opt, sched, (a, b, c)

    results = []
    for cls in (twin(name), getattr(fused_optim, name)):
        opt, sched, (a, b, c) = build(cls)
        losses = []
        for step in range(12):
            if step == 4:
                opt.add_param_group({"params": [c]})

            def closure():
                opt.zero_grad()
                loss = (a.sin().sum() + (b * b).sum() + (c.cos().sum() if step >= 4 else 0)) * (1 + step % 3)
                loss.backward()
                return loss

            losses.append(float(opt.step(closure)))
            sched.step()
        results.append((losses, [t.detach().clone() for t in (a, b, c)], opt.param_groups[0]["lr"]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-12)
    for x, y in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(y, x, rtol=1e-12, atol=1e-14)
    assert results[0][2] == results[1][2]


@pytest.mark.parametrize("name", ["Adam", "SGD", "RMSprop", *RESEARCH])
def test_tensor_lr_and_a_learning_rate_that_requires_grad(name):
    kw = dict(RICH[name], lr=torch.tensor(0.01, dtype=torch.float64))
    _, _, rp, op = twins.run_both(name, kw, torch.float64, steps=5)
    for a, b in zip(rp, op):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    # A learning rate that requires grad is the twin's own step's (torch.optim's, or the reference's).
    kw["lr"] = torch.tensor(0.01, dtype=torch.float64, requires_grad=True)
    _, _, rp, op = twins.run_both(name, kw, torch.float64, steps=3)
    for a, b in zip(rp, op):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_grad_none_params_are_skipped_and_zero_grad(name):
    p = [torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)]
    opt = getattr(fused_optim, name)(p, **RICH[name])
    p[0].grad = torch.ones(3)
    opt.step()
    assert torch.equal(p[1].detach(), torch.ones(2))
    assert p[1] not in opt.state or not opt.state[p[1]] or name == "Adagrad"
    opt.zero_grad()
    assert p[0].grad is None


@pytest.mark.parametrize("name", ALL)
def test_mixed_dtypes_in_one_group(name):
    def make(dtype):
        del dtype
        gen = torch.Generator().manual_seed(3)
        return [torch.randn(4, generator=gen, dtype=torch.float32).requires_grad_(),
                torch.randn(3, generator=gen, dtype=torch.float64).requires_grad_()]

    _, _, rp, op = twins.run_both(name, RICH[name], None, steps=5, make_params=make)
    torch.testing.assert_close(op[0], rp[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(op[1], rp[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ALL)
def test_low_precision_params_use_float32_math(name, dtype):
    # Reference: torch.optim on float32 copies. Our kernel rounds once per state per step, torch
    # rounds after every elementary op, so compare against float32 with the storage precision.
    kw = RICH[name]
    gen = torch.Generator().manual_seed(0)
    p32 = [torch.randn(64, generator=gen).requires_grad_()]
    plo = [p32[0].detach().to(dtype).requires_grad_()]
    ref, ours = twin(name)(p32, **kw), getattr(fused_optim, name)(plo, **kw)
    for step in range(5):
        g = torch.randn(64, generator=torch.Generator().manual_seed(step))
        p32[0].grad, plo[0].grad = g.clone(), g.to(dtype)
        ref.step()
        ours.step()
    assert plo[0].dtype == dtype
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(plo[0].float(), p32[0].detach(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ALL)
def test_complex_params_match_the_twin(name):
    if name == "Adafactor":  # torch's Adafactor rejects complex parameters; so does ours, untouched
        p = torch.ones(2, dtype=torch.complex64, requires_grad=True)
        for cls in (torch.optim.Adafactor, fused_optim.Adafactor):
            p.grad = torch.ones_like(p)
            with pytest.raises(RuntimeError, match="does not support complex"):
                cls([p]).step()
            assert torch.equal(p.detach(), torch.ones_like(p))
        return
    def make(dtype):
        del dtype
        gen = torch.Generator().manual_seed(5)
        return [torch.randn(4, generator=gen, dtype=torch.complex128).requires_grad_()]

    _, _, rp, op = twins.run_both(name, RICH[name], None, steps=6, make_params=make)
    torch.testing.assert_close(op[0], rp[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", [name for name in ALL if name not in ("SGD", "Adagrad")])
def test_sparse_gradients_rejected_like_the_twin(name):
    p = torch.ones(3, requires_grad=True)
    for cls, named in ((twin(name), ""), (getattr(fused_optim, name), name)):  # torch's AdamW says "Adam"
        opt = cls([p])
        p.grad = torch.ones(3).to_sparse()
        with pytest.raises(RuntimeError, match=f"{named} does not support sparse gradients"):
            opt.step()
        assert torch.equal(p.detach(), torch.ones(3)) and not opt.state


@pytest.mark.parametrize("name", ["SGD", "Adagrad"])
def test_sparse_gradients_supported_where_torch_supports_them(name):
    def make(dtype):
        del dtype
        return [torch.ones(5, dtype=torch.float64, requires_grad=True)]

    ref_p, our_p = make(None), make(None)
    ref, ours = getattr(torch.optim, name)(ref_p, lr=0.1), getattr(fused_optim, name)(our_p, lr=0.1)
    for _ in range(3):
        g = torch.tensor([0.0, 1.0, 0.0, -2.0, 0.0], dtype=torch.float64).to_sparse()
        ref_p[0].grad, our_p[0].grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    # A sparse gradient is handed to torch's own step (_sparse_to_torch): the same computation.
    torch.testing.assert_close(our_p[0], ref_p[0], rtol=0, atol=0)


@pytest.mark.parametrize("name", ALL)
def test_nan_and_inf_propagate_like_the_twin(name):
    def make(dtype):
        del dtype
        return [torch.linspace(-1, 1, 6, dtype=torch.float64).requires_grad_()]

    ref_p, our_p = make(None), make(None)
    ref, ours = twin(name)(ref_p, **RICH[name]), getattr(fused_optim, name)(our_p, **RICH[name])
    grads = [torch.tensor([0.5, float("nan"), -0.5, 1.0, 0.0, 2.0], dtype=torch.float64),
             torch.tensor([float("inf"), 1.0, 0.0, float("-inf"), 0.3, 0.1], dtype=torch.float64),
             torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], dtype=torch.float64)]
    for g in grads:
        ref_p[0].grad, our_p[0].grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    torch.testing.assert_close(our_p[0], ref_p[0], rtol=1e-12, atol=1e-14, equal_nan=True)


def test_constructor_checks_are_torch_optim_s():
    p = [torch.ones(1, requires_grad=True)]
    for name, bad in [("Adam", dict(lr=-1.0)), ("Adam", dict(betas=(1.0, 0.9))), ("Adam", dict(eps=-1.0)),
                      ("SGD", dict(lr=0.1, nesterov=True)), ("RMSprop", dict(alpha=-1.0)),
                      ("Adagrad", dict(lr_decay=-1.0)), ("Adadelta", dict(rho=1.5)),
                      ("Adamax", dict(weight_decay=-1.0)), ("RAdam", dict(betas=(0.9, 1.0))),
                      ("NAdam", dict(momentum_decay=-1.0)), ("NAdam", dict(betas=(0.9, 1.0))),
                      ("Rprop", dict(etas=(1.5, 1.2))), ("Rprop", dict(lr=-1.0)), ("ASGD", dict(weight_decay=-0.1)),
                      ("Adafactor", dict(beta2_decay=0.5)), ("Adafactor", dict(d=0.5))]:
        with pytest.raises(ValueError) as theirs:
            getattr(torch.optim, name)(p, **bad)
        with pytest.raises(ValueError) as ours:
            getattr(fused_optim, name)(p, **bad)
        assert str(ours.value) == str(theirs.value)


def test_subclasses_of_torch_optim():
    for name in NAMES:
        cls = getattr(fused_optim, name)
        assert issubclass(cls, torch.optim.Optimizer) and issubclass(cls, getattr(torch.optim, name))


def test_differentiable_groups_fall_back_to_torch():
    # differentiable=True updates non-leaf params in place inside the autograd graph: torch's path.
    leaf = torch.ones(3, dtype=torch.float64, requires_grad=True)
    results = []
    for cls in (fused_optim.Adam, torch.optim.Adam):
        p = leaf * 1.0
        p.retain_grad()
        opt = cls([p], lr=0.1, differentiable=True)
        p.grad = torch.full((3,), 0.5, dtype=torch.float64)
        opt.step()
        results.append(torch.autograd.grad(p.sum(), leaf)[0])
    torch.testing.assert_close(results[0], results[1])


def test_step_hooks_run():
    p = torch.ones(2, requires_grad=True)
    opt = fused_optim.Adam([p])
    calls = []
    opt.register_step_pre_hook(lambda *a: calls.append("pre"))
    opt.register_step_post_hook(lambda *a: calls.append("post"))
    p.grad = torch.ones(2)
    opt.step()
    assert calls == ["pre", "post"]


class _CountingRecord:
    """Stands in for torch.autograd.profiler.record_function: counts the ranges entered."""

    names: ClassVar[list[str]] = []

    def __init__(self, name, args=None):
        self.name = name

    def __enter__(self):
        _CountingRecord.names.append(self.name)

    def __exit__(self, *exc):
        return False


def test_step_enters_no_profiler_range_when_nothing_observes_it(monkeypatch):
    # torch.optim enters record_function on every step; the drop-in classes only where a profiler
    # runs or a step hook is registered (the same wrapper then, see the tests below).
    monkeypatch.setattr(torch.autograd.profiler, "record_function", _CountingRecord)
    monkeypatch.setattr(_CountingRecord, "names", [])
    p = torch.ones(2, requires_grad=True)
    p.grad = torch.ones(2)
    torch.optim.Adam([p]).step()  # the stand-in sees torch's range, so it can see ours
    assert _CountingRecord.names == ["Optimizer.step#Adam.step"]
    opt = fused_optim.Adam([p])
    marks = []
    opt._optimizer_step_code = lambda: marks.append(1)  # the profiler's marker, still called
    opt.step()
    opt.step()
    assert _CountingRecord.names == ["Optimizer.step#Adam.step"] and marks == [1, 1]
    assert opt.state[p]["step"].item() == 2


def test_zero_grad_enters_no_profiler_range_when_no_profiler_runs(monkeypatch):
    monkeypatch.setattr(torch.autograd.profiler, "record_function", _CountingRecord)
    monkeypatch.setattr(_CountingRecord, "names", [])
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    opt = fused_optim.Adam([{"params": [a]}, {"params": [b]}])
    a.grad = torch.ones(2)
    opt.zero_grad()
    assert a.grad is None and b.grad is None and _CountingRecord.names == []
    a.grad = torch.ones(2)
    opt.zero_grad(set_to_none=False)  # torch's own, range included
    torch.testing.assert_close(a.grad, torch.zeros(2))
    assert _CountingRecord.names == ["Optimizer.zero_grad#Adam.zero_grad"]


def test_step_is_a_profiler_range_while_profiling():
    p = torch.ones(2, requires_grad=True)
    p.grad = torch.ones(2)
    opt = fused_optim.SGD([p], lr=0.1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
        opt.zero_grad()
    names = [e.name for e in prof.events()]
    assert names.count("Optimizer.step#SGD.step") == 1 and names.count("Optimizer.zero_grad#SGD.zero_grad") == 1
    torch.testing.assert_close(p.detach(), torch.full((2,), 0.9))
    assert p.grad is None


def test_global_step_hooks_run_and_may_replace_the_arguments():
    p = torch.ones(2, requires_grad=True)
    p.grad = torch.ones(2)
    opt = fused_optim.SGD([p], lr=0.1)
    seen = []

    def pre(optimizer, args, kwargs):
        seen.append(("pre", optimizer is opt))
        return args, {**kwargs, "closure": lambda: 7.0}  # the step then runs this closure

    def post(optimizer, args, kwargs):
        seen.append(("post", "closure" in kwargs))

    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
    try:
        assert opt.step() == 7.0
    finally:
        for handle in handles:
            handle.remove()
    assert seen == [("pre", True), ("post", True)]
    assert opt.step() is None  # hooks removed: the closure is ours again (none)
    torch.testing.assert_close(p.detach(), torch.full((2,), 0.8))


def _two_groups(name):
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    opt = getattr(fused_optim, name)([{"params": [a]}, {"params": [b]}], lr=0.1, **(
        dict(momentum=0.9) if name in ("SGD", "RMSprop") else {}))
    a.grad, b.grad = torch.ones(3), torch.ones(3)
    return opt, a, b


@pytest.mark.parametrize("name", ALL)
def test_a_bad_second_group_leaves_the_first_untouched(name):
    # One kernel call per group: the second group's error used to come after the first group
    # (and its freshly created state) had been updated.
    opt, a, b = _two_groups(name)
    opt.param_groups[1]["lr"] = -1.0
    before = copy.deepcopy(opt.state_dict()["state"])  # Adagrad creates its state up front
    with pytest.raises(ValueError, match="learning rate"):
        opt.step()
    assert torch.equal(a.detach(), torch.ones(3)) and torch.equal(b.detach(), torch.ones(3))
    after = opt.state_dict()["state"]
    assert after.keys() == before.keys()
    for k in before:
        assert after[k].keys() == before[k].keys()
        assert all(torch.equal(after[k][key], before[k][key]) for key in before[k])
    opt.param_groups[1]["lr"] = 0.1
    opt.step()  # and the optimizer still works, from a clean first step
    ref = twin(name)([torch.nn.Parameter(torch.ones(3))], lr=0.1, **(
        dict(momentum=0.9) if name in ("SGD", "RMSprop") else {}))
    ref.param_groups[0]["params"][0].grad = torch.ones(3)
    ref.step()
    torch.testing.assert_close(a.detach(), ref.param_groups[0]["params"][0].detach())


@pytest.mark.parametrize("name", NAMES)
def test_state_of_the_wrong_shape_in_a_second_group_is_rejected_first(name):
    opt, a, b = _two_groups(name)
    opt.step()
    key = next(k for k, v in opt.state[b].items() if torch.is_tensor(v) and v.dim() == 1)
    opt.state[b][key] = torch.zeros(5)  # e.g. a state_dict loaded for other parameters
    before = copy.deepcopy(opt.state_dict()), a.detach().clone()
    with pytest.raises(ValueError, match="shape"):
        opt.step()
    assert torch.equal(a.detach(), before[1])
    after = opt.state_dict()["state"]
    for k, v in before[0]["state"][0].items():
        assert torch.equal(torch.as_tensor(after[0][k]), torch.as_tensor(v))


@pytest.mark.parametrize("name", NAMES)
def test_a_parameter_listed_twice_in_a_group_is_rejected(name):
    # SGD used to apply a second update from an uninitialized momentum buffer (values ~1e28).
    w = torch.nn.Parameter(torch.ones(3))
    with pytest.warns(UserWarning, match="duplicate"):
        opt = getattr(fused_optim, name)([w, w], lr=0.1, **(dict(momentum=0.9) if name in ("SGD", "RMSprop")
                                                            else {}))
    w.grad = torch.ones(3)
    steps = [s["step"].item() for s in opt.state.values() if "step" in s]
    with pytest.raises(ValueError, match="twice"):
        opt.step()
    assert torch.equal(w.detach(), torch.ones(3))
    assert [s["step"].item() for s in opt.state.values() if "step" in s] == steps


@pytest.mark.parametrize("name", NAMES)
def test_compiled_step_runs_the_fused_kernel(name):
    # dynamo marks compiled groups capturable; for CPU parameters that changes nothing, so the
    # compiled step must put the fused op in the graph and match the eager step bitwise.
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    kwargs = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.1)
    eager_params = twins.params(torch.float32)
    compiled_params = [p.detach().clone().requires_grad_() for p in eager_params]
    eager = getattr(fused_optim, name)(eager_params, **kwargs)
    compiled = getattr(fused_optim, name)(compiled_params, **kwargs)
    backend = CompileCounterWithBackend("aot_eager")
    compiled_step = torch.compile(compiled.step, backend=backend)
    for step in range(3):
        for a, b, g in zip(eager_params, compiled_params, twins.grads(eager_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        eager.step()
        compiled_step()
    assert any("fused_optim." in graph.code for graph in backend.graphs)
    for a, b in zip(eager_params, compiled_params):
        assert torch.equal(b, a)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_compiled_multi_group_step_matches_eager(name):
    # Two groups make the step check every call first (ops.validate_only); compiled, that pass
    # must trace and the results still equal the eager step bitwise.
    torch._dynamo.reset()
    kwargs = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.1)
    eager_params = twins.params(torch.float32)
    compiled_params = [p.detach().clone().requires_grad_() for p in eager_params]
    eager = getattr(fused_optim, name)([{"params": eager_params[:1]}, {"params": eager_params[1:], "lr": 0.05}],
                                       **kwargs)
    compiled = getattr(fused_optim, name)(
        [{"params": compiled_params[:1]}, {"params": compiled_params[1:], "lr": 0.05}], **kwargs)
    compiled_step = torch.compile(compiled.step, backend="aot_eager")
    for step in range(3):
        for a, b, g in zip(eager_params, compiled_params, twins.grads(eager_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        eager.step()
        compiled_step()
    for a, b in zip(eager_params, compiled_params):
        assert torch.equal(b, a)


def test_a_graph_break_inside_validate_only_leaves_later_steps_updating():
    # torch.compile ran the mode switch while tracing; a trace given up at a graph break inside
    # the block never ran the restore, and every later eager step only checked its arguments.
    torch._dynamo.reset()

    def checked_then_stepped(x):
        with fused_optim.ops.validate_only():
            torch._dynamo.graph_break()
            y = x + 1
        return y

    torch.testing.assert_close(torch.compile(checked_then_stepped, backend="aot_eager")(torch.ones(2)),
                               torch.full((2,), 2.0))
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    fused_optim.SGD([p], lr=0.5).step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 0.5))


def test_capturable_cpu_groups_keep_the_fused_kernel():
    # capturable only moves step counters to the parameters' device: for CPU parameters the step
    # is the plain one (torch's own eager Adam refuses capturable CPU parameters altogether).
    ref_params = twins.params(torch.float64)
    our_params = [p.detach().clone().requires_grad_() for p in ref_params]
    ref = torch.optim.Adam(ref_params, lr=0.1)
    ours = fused_optim.Adam(our_params, lr=0.1, capturable=True)
    assert not _common.torch_path_needed(ours)
    for step in range(3):
        for a, b, g in zip(ref_params, our_params, twins.grads(ref_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, **TOL[torch.float64])


@pytest.mark.parametrize("name", ["SGD", "Adagrad"])
def test_sparse_gradients_after_dense_steps_and_from_a_closure_go_to_torch(name):
    # The sparse check runs off the reused step (which declines a sparse gradient) and after the
    # closure, on the gradients the closure left: dense steps first (the step is reused by then),
    # then sparse ones, the last made by a closure where the gradient was None before it.
    ref_p = [torch.ones(5, dtype=torch.float64, requires_grad=True)]
    our_p = [torch.ones(5, dtype=torch.float64, requires_grad=True)]
    ref, ours = getattr(torch.optim, name)(ref_p, lr=0.1), getattr(fused_optim, name)(our_p, lr=0.1)
    dense = torch.tensor([0.5, 1.0, -1.0, -2.0, 3.0], dtype=torch.float64)
    for _ in range(3):
        ref_p[0].grad, our_p[0].grad = dense.clone(), dense.clone()
        ref.step()
        ours.step()
    assert "_gathered" in ours.__dict__
    sparse = torch.tensor([0.0, 1.0, 0.0, -2.0, 0.0], dtype=torch.float64).to_sparse()
    ref_p[0].grad, our_p[0].grad = sparse.clone(), sparse.clone()
    ref.step()
    ours.step()
    for p in (*ref_p, *our_p):
        p.grad = None

    def closure(p: torch.Tensor) -> float:
        p.grad = sparse.clone()
        return 1.5

    assert ref.step(lambda: closure(ref_p[0])) == 1.5
    assert ours.step(lambda: closure(our_p[0])) == 1.5
    torch.testing.assert_close(our_p[0], ref_p[0], rtol=1e-14, atol=1e-15)
    assert not torch.equal(our_p[0].detach(), torch.ones(5, dtype=torch.float64))
