"""The CUDA launch plan (csrc/cuda/launch_plan.h) without a GPU: the plan of any sizes, read from
``fused_optim._C``, and every kernel run through the plan and the CUDA kernel body on the host
(the CUDA emulation test mode), against the CPU loops and torch.optim. CI also runs the kernel
test files whole in that mode (``FUSED_OPTIM_EMULATE_CUDA=1``, see noxfile.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch
from helpers import FUNCTIONAL_CASES, op
from twins import run_both

from fused_optim import _C
from fused_optim.ops import FUNCTIONAL_OPS

LIMITS = _C.CUDA_LAUNCH
CHUNK = LIMITS["chunk_size"]
PER_LAUNCH = LIMITS["tensors_per_launch"]
MAX_BLOCKS = LIMITS["max_grid_blocks"]


def chunks(n: int) -> int:
    return -(-n // CHUNK)


def checked_plan(numel: list[int]) -> list[list[tuple[int, int, int]]]:
    """The plan for tensors of ``numel`` elements, checked: each launch within the limits, each
    tensor's chunks covered once, in order, and no slot for an empty tensor."""
    plan = _C._cuda_launch_plan(numel)
    covered = [0] * len(numel)
    last = -1
    for launch in plan:
        assert 1 <= len(launch) <= PER_LAUNCH
        assert sum(c for _, _, c in launch) <= MAX_BLOCKS
        for tensor, first, count in launch:
            assert count >= 1 and first == covered[tensor] and tensor >= last
            covered[tensor] += count
            last = tensor
    assert covered == [chunks(n) for n in numel]
    return plan


def test_a_call_over_more_tensors_than_a_launch_holds_continues_in_the_next():
    assert checked_plan([1] * PER_LAUNCH) == [[(t, 0, 1) for t in range(PER_LAUNCH)]]
    plan = checked_plan([1] * (PER_LAUNCH + 1))
    assert [len(launch) for launch in plan] == [PER_LAUNCH, 1]
    assert plan[1] == [(PER_LAUNCH, 0, 1)]


def test_empty_tensors_take_no_slot():
    assert checked_plan([]) == []
    assert checked_plan([0, 0]) == []
    assert checked_plan([0, 5, 0, 3, 0]) == [[(1, 0, 1), (3, 0, 1)]]
    # Empty tensors do not count towards a launch's tensors.
    assert [len(launch) for launch in checked_plan([0, 1] * PER_LAUNCH)] == [PER_LAUNCH]


def test_a_tensor_gets_one_block_per_chunk():
    assert checked_plan([CHUNK]) == [[(0, 0, 1)]]
    assert checked_plan([CHUNK + 1, 1]) == [[(0, 0, 2), (1, 0, 1)]]
    assert checked_plan([3 * CHUNK + 1]) == [[(0, 0, 4)]]


def test_more_than_two_to_the_31_elements_are_planned_whole():
    numel = [2**31 + 5, 2**32, 3, 2**33 + CHUNK - 1]
    plan = checked_plan(numel)
    assert plan == [[(t, 0, chunks(n)) for t, n in enumerate(numel)]]


def test_a_tensor_with_more_chunks_than_a_grid_holds_spans_launches():
    assert checked_plan([CHUNK * (MAX_BLOCKS + 10)]) == [[(0, 0, MAX_BLOCKS)], [(0, MAX_BLOCKS, 10)]]
    # A grid filled part way: the tensor that overflows it continues where it stopped.
    assert checked_plan([5, CHUNK * MAX_BLOCKS, 1]) == [[(0, 0, 1), (1, 0, MAX_BLOCKS - 1)],
                                                        [(1, MAX_BLOCKS - 1, 1), (2, 0, 1)]]


def test_random_calls_are_covered_within_the_limits():
    rng = random.Random(0)
    for _ in range(200):
        sizes = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK, 2**40, MAX_BLOCKS * CHUNK // 3]
        checked_plan([rng.choice(sizes) for _ in range(rng.randrange(0, 3 * PER_LAUNCH))])


def test_a_negative_count_is_rejected():
    with pytest.raises(ValueError, match="negative"):
        _C._cuda_launch_plan([3, -1])


@pytest.fixture
def emulated() -> Iterator[None]:
    previous = _C._emulate_cuda(True)
    try:
        yield
    finally:
        _C._emulate_cuda(previous)


def test_the_switch_routes_cpu_calls_through_the_emulated_launches(emulated):
    p, g = [torch.ones(3)] * (PER_LAUNCH + 1), [torch.ones(3)] * (PER_LAUNCH + 1)
    kwargs = dict(lr=0.5, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False,
                  first_step=False)
    before = _C._emulated_launches()
    new_p, _ = op("sgd_update")(p, g, [], **kwargs)
    assert _C._emulated_launches() - before == 2  # 33 tensors: two launches
    assert all(torch.equal(x, torch.full((3,), 0.5)) for x in new_p)
    assert _C._emulate_cuda(False) is True
    op("sgd_update")(p, g, [], **kwargs)
    assert _C._emulated_launches() - before == 2  # the CPU loops ran
    assert _C._emulate_cuda() is False  # no argument: only reads


# 0-d, empty, several chunks, and enough tensors for two launches.
SHAPES = [(), (0,), (7,), (3, 5), (2 * CHUNK + 3,)] + [(9,)] * PER_LAUNCH


def _cpu_loops_and_emulated(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    previous = _C._emulate_cuda(False)
    try:
        expected = fn(*args, **kwargs)
        _C._emulate_cuda(True)
        before = _C._emulated_launches()
        got = fn(*args, **kwargs)
        assert _C._emulated_launches() > before
    finally:
        _C._emulate_cuda(previous)
    return expected, got


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES])
def test_every_kernel_through_the_cuda_plan_matches_the_cpu_loops(case, dtype):
    # The same math header on both sides: only the launch plan, the indexing and the element
    # access (functional ops read the caller's tensors and write fresh ones) differ.
    # Adafactor's factored case takes matrices (its row and column means of an empty one are NaN).
    shapes = [s for s in SHAPES if len(s) >= 1 and s != (0,)] if case.matrices else SHAPES
    lists = case.make(torch.float64, shapes=shapes)
    lists = [[t.to(dtype) for t in lst] for lst in lists]
    expected, got = _cpu_loops_and_emulated(op(case.op), *lists, **case.kwargs)
    tol = {torch.float64: dict(rtol=1e-12, atol=1e-14), torch.float32: dict(rtol=1e-5, atol=1e-6)}.get(
        dtype, dict(rtol=1e-2, atol=1e-2))
    for a, b in zip(expected, got, strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(y, x, **tol)
    gen = torch.Generator().manual_seed(1)
    cotangents = [[torch.randn(t.shape, generator=gen, dtype=torch.float64).to(dtype) for t in lst]
                  for lst in expected]
    saved = [lists[i] for i in FUNCTIONAL_OPS[case.op].saved]
    expected_b, got_b = _cpu_loops_and_emulated(op(case.op + "_backward"), *cotangents, *saved, **case.kwargs)
    for a, b in zip(expected_b, got_b, strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(y, x, **tol)


@pytest.fixture
def small_grids(emulated) -> Iterator[None]:
    previous = _C._emulated_grid_limit(3)
    try:
        yield
    finally:
        _C._emulated_grid_limit(previous)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES if c.op in
                                  ("adam_update", "rmsprop_update", "adafactor_update")])
def test_tensors_spanning_launches_match_the_cpu_loops(small_grids, case):
    # A grid of 3 blocks: a tensor of 7 chunks continues over three launches (on a GPU that takes
    # more than 2^31 chunks), each starting where the last stopped.
    lists = case.make(torch.float64, shapes=[(7 * CHUNK + 5,), (5,), (2, 2 * CHUNK)])
    before = _C._emulated_launches()
    got = op(case.op)(*lists, **case.kwargs)
    assert _C._emulated_launches() - before >= 5
    _C._emulate_cuda(False)
    expected = op(case.op)(*lists, **case.kwargs)
    for a, b in zip(expected, got, strict=True):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(y, x, rtol=1e-12, atol=1e-14)


def test_the_emulated_grid_limit_is_checked():
    with pytest.raises(ValueError, match="grid limit"):
        _C._emulated_grid_limit(0)
    with pytest.raises(ValueError, match="grid limit"):
        _C._emulated_grid_limit(MAX_BLOCKS + 1)


@pytest.mark.parametrize("name, kwargs", [("Adafactor", dict(lr=0.05, weight_decay=0.1, d=1.5)),
                                          ("ASGD", dict(lr=0.05, t0=2, weight_decay=0.1)),
                                          ("Adam", dict(lr=0.01, amsgrad=True))])
def test_drop_in_steps_through_the_cuda_plan_match_torch(emulated, name, kwargs):
    # Adafactor's five per-tensor scalars once overflowed the launch's four.
    _, _, ref_params, our_params = run_both(name, kwargs, torch.float64)
    for a, b in zip(ref_params, our_params, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
