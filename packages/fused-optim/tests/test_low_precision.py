"""float16 and bfloat16 tensors: every functional op against the pure-PyTorch reference run in
float32 on the same values and rounded once, the drop-in steps against torch.optim's 16-bit paths,
and the conversions of special values, bit pattern by bit pattern (the CPU kernels widen 16-bit
blocks to float32, run the float32 loops and narrow the results with round-to-nearest-even)."""

from __future__ import annotations

import pytest
import torch
from helpers import FUNCTIONAL_CASES, SHAPES, op, tolerances

import fused_optim
from fused_optim import _reference

LOW = [torch.float16, torch.bfloat16]
# Beside the small shapes, one past a 1024-element float32 block and a 16- and 8-lane vector, so
# the block loop, its tail and the vector conversions' scalar tails all run.
LOW_SHAPES = [*SHAPES, (2500,)]
CASES = [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES]


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype``'s numbers at the magnitudes of the float32 tensor ``x``."""
    info = torch.finfo(dtype)
    _, exponent = torch.frexp(x.abs().clamp(min=info.smallest_normal))  # |x| in [2^(e-1), 2^e)
    mantissa_bits = {torch.float16: 10, torch.bfloat16: 7}[dtype]
    return torch.ldexp(torch.ones_like(x), exponent - 1 - mantissa_bits)


def assert_rounded_once(got: torch.Tensor, want32: torch.Tensor, dtype: torch.dtype) -> None:
    """``got`` (16-bit) is ``want32`` (the float32 result) rounded to nearest, up to float32 noise.

    The kernel's float32 math and the reference's are the same formulas in an order that may
    differ, so their float32 results differ by a few float32 ulps of the operands (1e-5 covers
    the cancellation in p - lr * u for operands of order 1). Rounding to nearest then puts ours at
    most half a 16-bit ulp from the float32 value; one rounding too many, a truncation or a
    double rounding would miss that bound on random data. NaN and infinity must match exactly.
    """
    assert got.dtype == dtype
    g, w = got.float(), want32
    assert torch.equal(g.isnan(), w.isnan())
    finite = w.isfinite()
    assert torch.equal(g[~finite & ~w.isnan()], w[~finite & ~w.isnan()])
    err = (g - w).abs()[finite]
    bound = 0.5 * ulp(w, dtype)[finite] + 1e-5 * (1 + w.abs()[finite])
    assert bool((err <= bound).all()), f"worst excess {(err - bound).max().item():.3g}"


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("case", CASES)
def test_values_match_float32_reference_rounded_once(case, dtype):
    lists = case.make(dtype, shapes=LOW_SHAPES)
    before = [[t.clone() for t in lst] for lst in lists]
    ours = op(case.op)(*lists, **case.kwargs)
    ref = getattr(_reference, case.op)(*[[t.float() for t in lst] for lst in lists], **case.kwargs)
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            if case.op == "adafactor_update":
                # Its op reduces the 16-bit tensors (row and column means, the update's RMS) with
                # torch in the storage type before the element kernels run: those scalars carry
                # their own 16-bit roundings into every element, so only closeness holds.
                torch.testing.assert_close(a.float(), b, **tolerances(dtype))
            else:
                assert_rounded_once(a, b, dtype)
    for lst, old in zip(lists, before):  # inputs untouched
        for t, o in zip(lst, old):
            assert torch.equal(t, o)


def _one_step(cls, dtype, kwargs, **torch_kwargs):
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(2500, generator=gen).to(dtype).requires_grad_()
    grads = [torch.randn(2500, generator=gen).to(dtype) for _ in range(2)]
    opt = cls([p], **kwargs, **torch_kwargs)
    for g in grads:  # the second step reads the states the first wrote
        p.grad = g.clone()  # torch's foreach paths may change the gradient in place
        opt.step()
    return p.detach(), opt.state[p]


# torch's CPU fused=True Adam and AdamW also keep 16-bit tensors and compute in float32 rounding
# each stored value once, as ours do: after the same steps the two may differ only where their
# float32 values straddle a rounding boundary, by one 16-bit ulp. (torch's fused SGD and Adagrad
# round intermediate values to 16 bits, so they are compared with the foreach path below.)
FUSED_TWINS = {"Adam": dict(lr=0.01, amsgrad=True), "AdamW": dict(lr=0.01, weight_decay=0.1)}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("name", list(FUSED_TWINS))
def test_step_matches_torch_fused(name, dtype):
    kw = FUSED_TWINS[name]
    ours, our_state = _one_step(getattr(fused_optim, name), dtype, kw)
    theirs, their_state = _one_step(getattr(torch.optim, name), dtype, kw, fused=True)
    for key in ["param", *(k for k in their_state if k != "step")]:
        a, b = (ours, theirs) if key == "param" else (our_state[key], their_state[key])
        assert a.dtype == dtype
        diff = (a.float() - b.float()).abs()
        assert bool((diff <= ulp(torch.maximum(a.float().abs(), b.float().abs()), dtype)).all()), key


# torch.optim's foreach path on 16-bit tensors rounds after every elementwise op (a handful per
# step), each rounding off by up to half an ulp of its operands (of order 1 here, as are the
# parameters): two steps of it lie within a few 16-bit epsilons of our once-rounded values.
FOREACH_TWINS = {"Adam": dict(lr=0.01), "AdamW": dict(lr=0.01, weight_decay=0.1),
                 "SGD": dict(lr=0.05, momentum=0.9, nesterov=True), "RMSprop": dict(lr=0.01, momentum=0.5),
                 "Adagrad": dict(lr=0.05, weight_decay=0.1)}


@pytest.mark.parametrize("name", list(FOREACH_TWINS))
def test_step_close_to_torch_foreach_in_bfloat16(name):
    # (Not float16: there torch's eps = 1e-8 rounds to 0 and its foreach Adam divides by zero.)
    kw, dtype = FOREACH_TWINS[name], torch.bfloat16
    ours, _ = _one_step(getattr(fused_optim, name), dtype, kw)
    theirs, _ = _one_step(getattr(torch.optim, name), dtype, kw, foreach=True)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=4 * eps, atol=4 * eps)


def _all_bit_patterns(dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


@pytest.mark.parametrize("dtype", LOW)
def test_every_bit_pattern_survives_the_round_trip(dtype):
    # SGD with lr = 0 and a gradient of 1 leaves p + (-0) * 1 = p: widening and narrowing alone.
    # Every finite, infinite, zero (of either sign) and subnormal value must come back bit for bit
    # and every NaN as c10's canonical quiet NaN (bfloat16: 0x7FC0; float16: the sign kept, 0x7E00).
    p = _all_bit_patterns(dtype).clone()
    q = p.clone().requires_grad_()
    q.grad = torch.ones_like(q)
    fused_optim.SGD([q], lr=0.0).step()
    got = q.detach().view(torch.int16).int() & 0xFFFF
    want = p.view(torch.int16).int() & 0xFFFF
    nan = p.isnan()
    assert torch.equal(got[~nan], want[~nan])
    canonical = torch.full_like(want, 0x7FC0) if dtype == torch.bfloat16 else (want & 0x8000) | 0x7E00
    assert torch.equal(got[nan], canonical[nan])


@pytest.mark.parametrize("lr", [1.0, 0.5, 0.75])
@pytest.mark.parametrize("dtype", LOW)
def test_rounding_of_every_bit_pattern_matches_torch(dtype, lr):
    # p - lr * g in float32 is exact or one IEEE rounding (lr a power of two times 1 or 3), the
    # same float32 value torch computes; ours must then narrow it exactly as torch's own
    # conversion does: ties to even, overflow past the largest finite to infinity (e.g. float16
    # 65504 + 16), results in the subnormal range, signed zeros.
    p = _all_bit_patterns(dtype)
    g = p[torch.randperm(p.numel(), generator=torch.Generator().manual_seed(0))]
    q = p.clone().requires_grad_()
    q.grad = g.clone()
    fused_optim.SGD([q], lr=lr).step()
    want = (p.float() - torch.tensor(lr) * g.float()).to(dtype)
    nan = want.isnan()
    assert torch.equal(q.detach().isnan(), nan)
    assert torch.equal(q.detach()[~nan].view(torch.int16), want[~nan].view(torch.int16))
