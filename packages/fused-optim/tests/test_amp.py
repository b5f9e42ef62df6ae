"""The drop-in optimizers under torch.amp: GradScaler hands them its scale and inf flag, their
kernels unscale the gradients and skip the step themselves, with the results of torch's fused
optimizers (Adam, AdamW, SGD, Adagrad) and of the twin stepped on unscaled gradients (all of
them); and the ops' own checks of ``grad_scale``/``found_inf``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from twins import RESEARCH, twin

import fused_optim
from fused_optim import _native, ops

NAMES = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "RAdam", "NAdam", "Rprop", "ASGD",
         "Adafactor", *RESEARCH]
KWARGS = {"SGD": dict(lr=0.05, momentum=0.9, dampening=0.1), "Adam": dict(lr=0.01, amsgrad=True),
          "AdamW": dict(lr=0.01), "RMSprop": dict(lr=0.01, centered=True, momentum=0.5),
          "Adagrad": dict(lr=0.1, lr_decay=0.01), "Adadelta": dict(lr=0.5), "Adamax": dict(lr=0.02),
          "RAdam": dict(lr=0.01), "NAdam": dict(lr=0.01), "Rprop": dict(lr=0.01),
          "ASGD": dict(lr=0.05, t0=2), "Adafactor": dict(lr=0.05), "Lion": dict(lr=0.01), "Adan": dict(lr=0.01)}
TORCH_FUSED = ["Adam", "AdamW", "SGD", "Adagrad"]  # torch.optim's classes with a fused CPU path
TOL = dict(rtol=1e-5, atol=1e-6)
STEPS = 8


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _scaled_backward(model: torch.nn.Module, scalers: list[torch.amp.GradScaler], step: int,
                     overflow: bool) -> None:
    """A bfloat16 autocast forward and the backward of ``scalers[0]``'s scaled loss (the others'
    scales start too: each must equal the first's); ``overflow`` makes one gradient infinite."""
    gen = torch.Generator().manual_seed(step)
    x, y = torch.randn(16, 6, generator=gen), torch.randn(16, 3, generator=gen)
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scalers[0].scale(loss).backward()
    for s in scalers[1:]:
        s.scale(loss)
    if overflow:
        model[0].weight.grad[1, 2] = float("inf")


def _lock_step(ours: Any, reference: Any, overflow_at: set[int], compare_grads: bool, check_skip: bool) -> None:
    """Steps ``ours`` and ``reference`` (optimizer, parameters, scaler each) on the same scaled gradients."""
    (our_opt, our_params, our_scaler), (ref_opt, ref_params, ref_scaler) = ours, reference
    model = _model()
    for step in range(STEPS):
        with torch.no_grad():  # our parameters drive the forward pass
            for m, p in zip(model.parameters(), our_params):
                m.copy_(p)
        _scaled_backward(model, [our_scaler, ref_scaler], step, overflow=step in overflow_at)
        for m, a, b in zip(model.parameters(), our_params, ref_params):
            a.grad, b.grad = m.grad.clone(), m.grad.clone()
        before = ([p.clone() for p in our_params], [g.clone() for g in (p.grad for p in our_params)],
                  {k: {n: v.clone() for n, v in s.items()} for k, s in our_opt.state.items()})
        scale = our_scaler.get_scale()
        our_scaler.step(our_opt)
        ref_scaler.step(ref_opt)
        our_scaler.update()
        ref_scaler.update()
        assert our_scaler.get_scale() == ref_scaler.get_scale()
        if step in overflow_at:  # the scaler saw the overflow
            assert our_scaler.get_scale() == scale / 2
        for a, b in zip(our_params, ref_params):
            torch.testing.assert_close(a, b, **TOL)
            if compare_grads:  # both unscale the gradients in place (or leave them where skipped)
                torch.testing.assert_close(a.grad, b.grad, **TOL)
        if check_skip and step in overflow_at:  # nothing changed: params, gradients, state
            params, grads, state = before
            assert all(torch.equal(a, b) for a, b in zip(our_params, params))
            assert all(torch.equal(p.grad, g) for p, g in zip(our_params, grads))
            for k, s in state.items():
                assert all(torch.equal(our_opt.state[k][n], v) for n, v in s.items())


def _setup(cls: type, kwargs: dict[str, Any], **extra: Any) -> tuple[Any, list[torch.Tensor], torch.amp.GradScaler]:
    params = [p.detach().clone().requires_grad_() for p in _model().parameters()]
    return cls(params, **kwargs, **extra), params, torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=3)


def _assert_same_state(ours: Any, reference: Any) -> None:
    a, b = ours.state_dict()["state"], reference.state_dict()["state"]
    assert a.keys() == b.keys()
    for k in a:
        assert list(a[k]) == list(b[k])
        for key, value in a[k].items():
            torch.testing.assert_close(value, b[k][key], **TOL)


@pytest.mark.parametrize("name", TORCH_FUSED)
def test_matches_torch_s_fused_optimizer_under_gradscaler(name):
    # A skipped first step: torch's fused SGD then keeps uninitialized momentum buffers, so SGD's
    # first overflow comes later (test_sgd_first_step_skipped covers that case).
    overflow_at = {3, 4} if name == "SGD" else {0, 3, 4}
    ours = _setup(getattr(fused_optim, name), KWARGS[name])
    reference = _setup(getattr(torch.optim, name), KWARGS[name], fused=True)
    _lock_step(ours, reference, overflow_at, compare_grads=True, check_skip=True)
    _assert_same_state(ours[0], reference[0])  # step counters included: skipped steps not counted


@pytest.mark.parametrize("name", NAMES)
def test_matches_the_twin_on_unscaled_gradients(name):
    # The twin (not fused) takes GradScaler's own path: unscale_, a host read of the inf flag and
    # no step() call at all where it is set.
    ours = _setup(getattr(fused_optim, name), KWARGS[name])
    reference = _setup(twin(name), KWARGS[name])
    assert not getattr(reference[0], "_step_supports_amp_scaling", False)
    _lock_step(ours, reference, {1, 4, 5}, compare_grads=False, check_skip=True)
    _assert_same_state(ours[0], reference[0])


def test_a_capturable_adafactor_matches_the_twin_under_gradscaler():
    # Its passes read found_inf themselves (the host does not), so it skips the overflowing steps
    # as the twin does (parameters and state, step counters included, stay the twin's); only its
    # gradients are unscaled on a skipped step too (see ops.adafactor_step_), so they are not compared.
    ours = _setup(fused_optim.Adafactor, KWARGS["Adafactor"], capturable=True)
    reference = _setup(torch.optim.Adafactor, KWARGS["Adafactor"])
    _lock_step(ours, reference, {0, 3, 4}, compare_grads=False, check_skip=False)
    _assert_same_state(ours[0], reference[0])
    assert all(float(s["step"]) == STEPS - 3 for s in ours[0].state.values())


def test_sgd_first_step_skipped():
    # torch's twin never steps: its first real step starts the buffers as the gradient; ours must
    # not keep the buffers created for the skipped step.
    ours = _setup(fused_optim.SGD, KWARGS["SGD"])
    reference = _setup(torch.optim.SGD, KWARGS["SGD"])
    _lock_step(ours, reference, {0, 1}, compare_grads=False, check_skip=True)
    _assert_same_state(ours[0], reference[0])


def test_torch_s_own_path_under_gradscaler():
    # Sparse gradients run torch.optim's SGD, whose non-fused path takes no AMP arguments: ours
    # unscales and skips for it, as GradScaler does for torch's own SGD.
    def run(cls: type) -> tuple[torch.Tensor, list[float]]:
        p = torch.ones(6, 2, requires_grad=True)
        opt, scaler = cls([p], lr=0.1, momentum=0.5), torch.amp.GradScaler("cpu", init_scale=4.0)
        scales = []
        for step in range(4):
            scale = scaler.scale(torch.ones(())).item()
            values = torch.full((2, 2), float("inf") if step == 1 else 1.0 + step) * scale
            p.grad = torch.sparse_coo_tensor(torch.tensor([[step, 5]]), values, (6, 2))
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        return p.detach(), scales
    (ours, our_scales), (ref, ref_scales) = run(fused_optim.SGD), run(torch.optim.SGD)
    assert our_scales == ref_scales == [4.0, 2.0, 2.0, 2.0]
    torch.testing.assert_close(ours, ref, **TOL)
    assert ours[5, 0] != 1.0 and ours[1, 0] == 1.0  # the skipped step's row is untouched


def test_gradscaler_hands_the_step_over():
    """GradScaler.step neither unscales for our optimizers nor reads the inf flag on the host:
    no unscale_ call and no host read of a tensor (torch's own non-fused Adam takes both)."""
    def count(cls: type, **extra: Any) -> tuple[int, int, int]:
        opt, params, scaler = _setup(cls, KWARGS["Adam"], **extra)
        model = _model()
        calls = []
        unscale = scaler.unscale_
        scaler.unscale_ = lambda o: (calls.append(o), unscale(o))[1]  # type: ignore[method-assign]
        _scaled_backward(model, [scaler], 0, overflow=False)
        for m, p in zip(model.parameters(), params):
            p.grad = m.grad
        with torch.profiler.profile() as prof:
            scaler.step(opt)
        names = [e.name for e in prof.events()]
        return len(calls), names.count("aten::_local_scalar_dense"), names.count("fused_optim::adam_step_")
    assert count(fused_optim.Adam) == (0, 0, 1)
    unscales, host_reads, _ = count(torch.optim.Adam)
    assert unscales == 1 and host_reads >= 1


def _adam(n: int = 2) -> tuple[list[list[torch.Tensor]], dict[str, Any]]:
    gen = torch.Generator().manual_seed(0)
    p = [torch.randn(4, generator=gen) for _ in range(n)]
    g = [torch.randn(4, generator=gen) for _ in range(n)]
    z = [[torch.zeros(4) for _ in range(n)] for _ in range(2)]
    return [p, g, *z, [], [torch.tensor(0.0) for _ in range(n)]], dict(
        lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
        decoupled_weight_decay=False)


@pytest.mark.parametrize("call", ["eager", "boxed"])
def test_op_unscales_in_place_and_skips(call):
    if call == "eager" and not _native.BUILD_INFO["eager"]:
        pytest.skip("no fast path under this torch")
    # boxed: torch.ops as fused-optim calls it (no version bump where found_inf skipped the step)
    run = _native.EAGER["adam_step_"] if call == "eager" else _native.boxed(torch.ops.fused_optim.adam_step_.default)
    args, kwargs = _adam()
    plain, _ = _adam()
    plain[1] = [g / 8.0 for g in plain[1]]
    ops.adam_step_(*plain, **kwargs)  # the same kernel on gradients unscaled beforehand
    assert run(*args, **kwargs, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(0.0)) is None
    for got, want in zip(args, plain):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    # found_inf set: nothing at all is written, the step counters included
    args, kwargs = _adam()
    kept = [[t.clone() for t in lst] for lst in args]
    versions = [t._version for lst in args for t in lst]
    assert run(*args, **kwargs, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(1.0)) is None
    assert all(torch.equal(a, b) for got, want in zip(args, kept) for a, b in zip(got, want))
    assert versions == [t._version for lst in args for t in lst]


@pytest.mark.skipif(not _native.BUILD_INFO["eager"], reason="no fast path under this torch")
def test_eager_call_takes_omitted_and_given_amp_arguments():
    # Omitted (None by the schema) or given, the unboxed call runs the op instead of declining.
    args, kwargs = _adam()
    assert _native.EAGER["adam_step_"](*args, **kwargs) is None
    assert _native.EAGER["adam_step_"](*args, **kwargs, grad_scale=None, found_inf=torch.tensor(0.0)) is None
    assert args[5][0].item() == 2.0


@pytest.mark.parametrize("key, value, error, message", [
    ("grad_scale", torch.ones(2), ValueError, "grad_scale must be a dense one-element tensor"),
    ("found_inf", torch.zeros(1, dtype=torch.float64), TypeError, "found_inf has dtype Double; expected float32"),
    ("grad_scale", torch.ones((), device="meta"), ValueError, "grad_scale is on meta but params are on cpu"),
])
@pytest.mark.parametrize("name", ["adam_step_", "sgd_step_"])
def test_bad_amp_arguments_are_rejected_before_any_write(name, key, value, error, message):
    if name == "adam_step_":
        args, kwargs = _adam()
    else:
        args, kwargs = [*_adam()[0][:2], []], dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0,
                                                     nesterov=False, maximize=False, first_step=False)
    kept = [[t.clone() for t in lst] for lst in args]
    with pytest.raises(error, match=message):
        getattr(ops, name)(*args, **kwargs, **{key: value})
    assert all(torch.equal(a, b) for got, want in zip(args, kept) for a, b in zip(got, want))


def test_step_takes_the_arguments_as_keywords():
    # What GradScaler passes as attributes also works as step()'s keywords (torch's fused protocol).
    (opt, params, _), (ref, ref_params, _) = _setup(fused_optim.Adam, {}), _setup(fused_optim.Adam, {})
    for p, q in zip(params, ref_params):
        p.grad = torch.full_like(p, 4.0)
        q.grad = torch.ones_like(q)
    opt.step(grad_scale=torch.tensor(4.0), found_inf=torch.tensor(0.0))
    ref.step()
    assert all(torch.equal(p, q) for p, q in zip(params, ref_params))
    opt.step(found_inf=torch.tensor(1.0))
    assert all(torch.equal(p, q) for p, q in zip(params, ref_params))
    assert all(s["step"].item() == 1.0 for s in opt.state.values())
