"""The CUDA kernels against the CPU kernels (same math headers, so these check indexing and
launch: chunking across blocks, several launches per call, dtypes). Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch
from helpers import FUNCTIONAL_CASES, op

import fused_optim
from fused_optim.ops import FUNCTIONAL_OPS

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not fused_optim.BUILD_INFO["cuda"], reason="fused_optim built without CUDA"),
]

# 40 tensors cross the 32-tensors-per-launch table; 3M elements span many 64k-element blocks.
SHAPES = [(), (7,), (3, 5)] + [(257,)] * 37 + [(3_000_000,)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES])
def test_functional_and_backward_ops_match_cpu(case, dtype):
    lists = case.make(dtype, shapes=SHAPES)
    cpu = op(case.op)(*lists, **case.kwargs)
    gpu = op(case.op)(*[[t.cuda() for t in lst] for lst in lists], **case.kwargs)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    for a, b in zip(cpu, gpu):
        for x, y in zip(a, b):
            torch.testing.assert_close(y.cpu(), x, **tol)
    spec = FUNCTIONAL_OPS[case.op]
    grads = [[torch.randn_like(t) for t in out] for out in cpu]
    saved = [lists[i] for i in spec.saved]
    cpu_b = op(case.op + "_backward")(*grads, *saved, **case.kwargs)
    gpu_b = op(case.op + "_backward")(*[[t.cuda() for t in g] for g in grads],
                                      *[[t.cuda() for t in s] for s in saved], **case.kwargs)
    for a, b in zip(cpu_b, gpu_b):
        for x, y in zip(a, b):
            torch.testing.assert_close(y.cpu(), x, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "RAdam"])
def test_drop_in_optimizers_on_cuda_match_cpu(name, dtype):
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(s, generator=gen).to(dtype).requires_grad_() for s in SHAPES[:6]]
    gpu = [p.detach().cuda().requires_grad_() for p in cpu]
    opt_cpu, opt_gpu = getattr(fused_optim, name)(cpu), getattr(fused_optim, name)(gpu)
    for step in range(5):
        for a, b in zip(cpu, gpu):
            g = torch.randn(a.shape, generator=torch.Generator().manual_seed(step)).to(dtype)
            a.grad, b.grad = g, g.cuda()
        opt_cpu.step()
        opt_gpu.step()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), **tol)


def test_mixed_devices_in_one_call_are_rejected():
    p = [torch.ones(3), torch.ones(3, device="cuda")]
    with pytest.raises((ValueError, RuntimeError)):
        op("sgd_update")(p, [torch.ones(3), torch.ones(3, device="cuda")], [], lr=0.1, momentum=0.0,
                         dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False, first_step=False)
