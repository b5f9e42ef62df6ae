"""What a step asks of the host: no read of a tensor's value through the dispatcher
(``aten::item``, a device synchronization off the CPU) per parameter, whatever dtype the state
scalars have."""

from __future__ import annotations

import pytest
import torch
import twins
from test_optim import ALL, RICH
from torch.profiler import ProfilerActivity, profile
from twins import twin

import fused_optim

READS = ("aten::item", "aten::_local_scalar_dense")  # a tensor's value read into a host number


def _params(n, dtype):
    gen = torch.Generator().manual_seed(n)
    return [torch.randn(3, 2, generator=gen, dtype=dtype).requires_grad_() for _ in range(n)]


def _reads_in_two_steps(name, n, dtype, reload):
    params = _params(n, dtype)
    opt = getattr(fused_optim, name)(params, **RICH[name])
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    if reload:  # load_state_dict casts the scalar state to the parameters' dtype, as torch.optim does
        opt.load_state_dict(opt.state_dict())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
        opt.step()
    return sum(e.count for e in prof.key_averages() if e.key in READS)


@pytest.mark.parametrize("reload", [False, True], ids=["fresh", "reloaded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ALL)
def test_a_step_reads_no_tensor_value_through_the_dispatcher(name, dtype, reload):
    counts = [_reads_in_two_steps(name, n, dtype, reload) for n in (10, 100)]
    assert counts == [0, 0]


SCALARS = {"ASGD": ("eta", "mu"), "NAdam": ("mu_product",)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("name", ["ASGD", "NAdam"])
def test_state_scalars_of_any_dtype_are_rounded_like_the_twin_s(name, dtype):
    # load_state_dict gives eta and mu (ASGD) and mu_product (NAdam) the parameters' dtype; here
    # they get `dtype` beside float64 parameters, which the step then reads and writes in that
    # dtype, rounded as torch.optim's in-place updates round them.
    ref_params = twins.params(torch.float64)
    our_params = [p.detach().clone().requires_grad_() for p in ref_params]
    kwargs = dict(RICH[name], lr=0.02, t0=1) if name == "ASGD" else RICH[name]
    ref, ours = twin(name)(ref_params, **kwargs), getattr(fused_optim, name)(our_params, **kwargs)
    for step in range(6):
        for a, b, g in zip(ref_params, our_params, twins.grads(ref_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
        if step == 1:
            for opt in (ref, ours):
                for state in opt.state.values():
                    state.update((key, state[key].to(dtype)) for key in SCALARS[name])
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, **twins.TOL[torch.float64])
        for key in SCALARS[name]:
            assert ours.state[b][key].dtype == dtype
            torch.testing.assert_close(ours.state[b][key], ref.state[a][key], rtol=0, atol=0)
