"""The CUDA launch plan (csrc/cuda/launch_plan.h) without a GPU: the plan of any sizes, read from
``fused_optim._C``, and every kernel run through the plan and the CUDA kernel body on the host
(the CUDA emulation test mode), against the CPU loops and torch.optim. CI also runs the kernel
test files whole in that mode (``FUSED_OPTIM_EMULATE_CUDA=1``, see noxfile.py)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from helpers import (
    ANY,
    EMPTY,
    FUNCTIONAL_CASES,
    GRAD,
    PARAM,
    POS,
    UNIT,
    FunctionalCase,
    op,
    two_adafactor_steps,
)
from twins import run_both

import fused_optim
from fused_optim import _C, ops
from fused_optim.ops import FUNCTIONAL_OPS

LIMITS = _C.CUDA_LAUNCH
CHUNK = LIMITS["chunk_size"]
SLOTS = LIMITS["slots_per_launch"]
PER_LAUNCH = SLOTS["AdamStep"]  # the planner's limit in the plan tests below; any kernel's would do
MAX_BLOCKS = LIMITS["max_grid_blocks"]


def chunks(n: int) -> int:
    return -(-n // CHUNK)


def checked_plan(numel: list[int]) -> list[list[tuple[int, int, int]]]:
    """The plan for tensors of ``numel`` elements, checked: each launch within the limits, each
    tensor's chunks covered once, in order, and no slot for an empty tensor."""
    plan = _C._cuda_launch_plan(numel, PER_LAUNCH)
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
        _C._cuda_launch_plan([3, -1], PER_LAUNCH)


def test_a_slot_limit_outside_the_planner_buffer_is_rejected():
    for bad in (0, LIMITS["max_slots_per_launch"] + 1):
        with pytest.raises(ValueError, match="slot limit"):
            _C._cuda_launch_plan([3], bad)


def test_every_kernel_fills_its_argument_within_the_parameter_limit():
    # Each kernel's launch holds as many tensors as its argument fits: a step of a couple of hundred
    # tensors (Adam's 200 x 1k) is one launch, and no kernel's argument passes CUDA's limit.
    assert set(SLOTS) == set(LIMITS["launch_meta_bytes"]) and len(SLOTS) == 35
    for name, slots in SLOTS.items():
        assert 64 <= slots <= LIMITS["max_slots_per_launch"], name
        assert LIMITS["max_kernel_param_bytes"] - 4096 < LIMITS["launch_meta_bytes"][name], name
        assert LIMITS["launch_meta_bytes"][name] < LIMITS["max_kernel_param_bytes"], name
    assert SLOTS["AdamStep"] >= 200 and SLOTS["SgdStep"] >= 200


@pytest.fixture
def emulated() -> Iterator[None]:
    previous = _C._emulate_cuda(True)
    try:
        yield
    finally:
        _C._emulate_cuda(previous)


def test_the_switch_routes_cpu_calls_through_the_emulated_launches(emulated):
    n = SLOTS["SgdStep"] + 1
    p, g = [torch.ones(3)] * n, [torch.ones(3)] * n
    kwargs = dict(lr=0.5, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False,
                  first_step=False)
    before = _C._emulated_launches()
    new_p, _ = op("sgd_update")(p, g, [], **kwargs)
    assert _C._emulated_launches() - before == 2  # one tensor more than a launch holds: two launches
    assert all(torch.equal(x, torch.full((3,), 0.5)) for x in new_p)
    assert _C._emulate_cuda(False) is True
    op("sgd_update")(p, g, [], **kwargs)
    assert _C._emulated_launches() - before == 2  # the CPU loops ran
    assert _C._emulate_cuda() is False  # no argument: only reads


# 0-d, empty, several chunks, and more tensors than any kernel's launch holds.
SHAPES = [(), (0,), (7,), (3, 5), (2 * CHUNK + 3,)] + [(9,)] * max(SLOTS.values())


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


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_device_norms_over_more_tensors_than_a_launch_holds_match_the_cpu_loops(small_grids, dtype):
    # Adafactor's norms of p and u on the CUDA path are two multi-tensor passes on the device (a
    # partial per chunk, then a total per tensor): here over more tensors than either pass's launch
    # holds, with a vector of 7 chunks and a matrix of 2 over three-block grids, an empty and a 0-d
    # parameter; the CPU loops reduce the same norms on the host. A misplaced partial changes a
    # norm, which scales the whole step of its tensor.
    gen = torch.Generator().manual_seed(5)
    shapes = [(7 * CHUNK + 5,), (0,), ()] + [(1 + i % 13,) for i in range(LIMITS["max_slots_per_launch"] + 40)]
    shapes.append((3, 2 * CHUNK // 3 + 1))
    start = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes] for _ in range(2)]

    before = _C._emulated_launches()
    got = two_adafactor_steps(start, grads)
    assert _C._emulated_launches() - before > 2 * 4 * 3  # each pass of each step over several launches
    _C._emulate_cuda(False)
    expected = two_adafactor_steps(start, grads)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-6, atol=1e-7)
    for x, y in zip(expected, got, strict=True):
        torch.testing.assert_close(y, x, **tol)


# Adafactor's matrix passes on the CUDA path (csrc/cuda/matrix_passes.h): the norms of g's rows
# (a group of threads per row), of its columns (partials over blocks of kColumnBlockRows rows, then
# added in row order) and the products r c (a block per chunk), each over every matrix of the call. Shapes
# past a block's columns and a partial's rows, a batch, a 4-D (conv) weight, matrices with no rows
# or no columns, a column and a row, batches whose threads' elements cross one matrix or many, and
# more matrices than a launch holds.
MATRIX_SHAPES = [(70, 300), (2, 33, 5), (3, 2, 4, 3), (0, 4), (4, 0), (100, 1), (1, 600), (7,), (60, 2, 3),
                 (2, 300, 5)]
MATRIX_SHAPES += [(2 + i % 5, 1 + i % 7) for i in range(LIMITS["matrix_slots_per_launch"] + 20)]


@pytest.mark.parametrize("batch, rows, cols", [(512 * 512, 3, 3), (1, 4096, 4096), (1, 50_000, 1), (64, 2, 7),
                                               (1, 3, 5), (1, 1000, 300), (8, 33, 100)])
def test_the_matrix_passes_keep_their_threads_busy_whatever_the_shape(batch, rows, cols):
    # A pass whose blocks mostly idle is a slow GPU step that no CPU test would see: a conv weight's
    # batch of 3 x 3 matrices once gave each row, and each column's 32 rows, a block of 256 threads
    # (3 busy). Each pass launches at most about two threads per element it reads or writes (or
    # one block), and the row norms add each row with at most the next power of two of threads.
    block = LIMITS["block_size"]
    elements, row_count, col_count = batch * rows * cols, batch * rows, batch * cols
    row_blocks, partial_blocks, col_blocks, product_blocks = _C._cuda_matrix_blocks(batch, rows, cols)
    for blocks, reads in ((row_blocks, elements), (partial_blocks, elements), (col_blocks, col_count),
                          (product_blocks, elements)):
        assert blocks * block <= max(2 * reads, block), (blocks, reads)
    group = 1 << max(cols - 1, 0).bit_length() if cols <= block else block
    assert row_blocks == -(-row_count // (block // group))
    row_groups = -(-rows // LIMITS["column_block_rows"])  # a partial per column and group of rows
    assert partial_blocks == -(-(row_groups * col_count) // block)
    assert product_blocks == chunks(elements)


@pytest.mark.parametrize("grid", [3, MAX_BLOCKS], ids=["three-block-grids", "full-grids"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_factored_steps_through_the_matrix_passes_match_the_cpu_loops(emulated, grid, dtype):
    gen = torch.Generator().manual_seed(11)
    start = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in MATRIX_SHAPES]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in MATRIX_SHAPES] for _ in range(2)]

    previous = _C._emulated_grid_limit(grid)
    try:
        before = _C._emulated_launches()
        got = two_adafactor_steps(start, grads)
        launches = _C._emulated_launches() - before
    finally:
        _C._emulated_grid_limit(previous)
    assert launches > (60 if grid == 3 else 2 * 4)  # each pass of each step, over many launches on small grids
    _C._emulate_cuda(False)
    expected = two_adafactor_steps(start, grads)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=2e-6, atol=1e-7)
    for x, y in zip(expected, got, strict=True):
        torch.testing.assert_close(y, x, equal_nan=True, **tol)  # (a (4, 0) matrix's row means are 0 / 0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_factored_update_and_backward_through_the_matrix_passes_match_the_cpu_loops(small_grids, dtype):
    shapes = [*MATRIX_SHAPES[:10], (3, 4)]
    gen = torch.Generator().manual_seed(12)

    def lists() -> list[list[torch.Tensor]]:
        params = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for s in shapes]
        grads = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for s in shapes]
        rows = [torch.rand((*s[:-1], 1), generator=gen, dtype=torch.float64).to(dtype) if len(s) > 1 else None
                for s in shapes]
        cols = [torch.rand((*s[:-2], 1, s[-1]), generator=gen, dtype=torch.float64).to(dtype) if len(s) > 1 else None
                for s in shapes]
        variances = [torch.rand(s, generator=gen, dtype=torch.float64).to(dtype) if len(s) < 2 else None
                     for s in shapes]
        return [params, grads, rows, cols, variances]

    given = lists()

    def run() -> list[torch.Tensor]:
        params, grads = ([x.detach().clone().requires_grad_() for x in lst] for lst in given[:2])
        new = fused_optim.functional.adafactor_update(params, grads, *given[2:], 3, lr=0.05, weight_decay=0.1)
        outs = [x for x in (*new.params, *new.row_vars, *new.col_vars) if x is not None]
        weights = [torch.linspace(-1, 1, x.numel(), dtype=x.dtype).reshape(x.shape) for x in outs]
        gp = torch.autograd.grad(outs, params + grads, weights, allow_unused=True)
        return outs + [g for g in gp if g is not None]

    got = run()
    _C._emulate_cuda(False)
    expected = run()
    tol = dict(rtol=1e-11, atol=1e-13) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-6)
    assert len(got) == len(expected)
    for x, y in zip(expected, got, strict=True):
        torch.testing.assert_close(y, x, equal_nan=True, **tol)


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


# The kernel body's vector path (launch_plan.h's VectorIO): where every pointer of a tensor's slot
# is 16-byte aligned, a thread takes W = 16 / itemsize consecutive elements of each column at once;
# a tensor's last partial group, and a slot with an unaligned pointer, go one element at a time.
VECTOR_BYTES = LIMITS["vector_bytes"]
VECTOR_SIZES = [1, 7, 8, 2047, 2048, 2049, 4100]  # below, at and past W, a chunk and a few
VECTOR_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _vector_lists(case: FunctionalCase, dtype: torch.dtype, misaligned: bool) -> list[list[torch.Tensor]]:
    """The case's lists over VECTOR_SIZES in ``dtype``; ``misaligned``: every second tensor's
    gradient (the case's second list) is a view at storage offset 1 of a larger tensor, so that
    tensor's slot takes the scalar path and the others the vector path."""
    lists = [[t.to(dtype) for t in lst] for lst in case.make(torch.float64, shapes=[(n,) for n in VECTOR_SIZES])]
    if misaligned:
        for t in range(1, len(VECTOR_SIZES), 2):
            x = lists[1][t]
            view = torch.empty(x.numel() + 1, dtype=dtype)[1:]
            view.copy_(x)
            assert view.data_ptr() % VECTOR_BYTES != 0
            lists[1][t] = view
    return lists


def _vector_groups(dtype: torch.dtype, misaligned: bool) -> int:
    """The groups the vector path runs for one call over VECTOR_SIZES (chunks hold whole groups)."""
    width = VECTOR_BYTES // dtype.itemsize
    return sum(n // width for t, n in enumerate(VECTOR_SIZES) if not (misaligned and t % 2))


def _assert_same(got, expected, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    # Both sides run the same math header in the same math type and round each stored value to the
    # storage type once (no FMA: -ffp-contract=off on the host, as the device's --fmad=false):
    # they agree to one unit in the last place of the storage type, which a vectorized libm call of
    # the CPU loops may change.
    info = torch.finfo(dtype)
    for a, b in zip(expected, got, strict=True):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(y, x, rtol=info.eps, atol=info.tiny)


def _both_paths(fn, lists, in_place: bool, **kwargs):  # type: ignore[no-untyped-def]
    """fn(*lists, **kwargs) through the CPU loops and through the emulated CUDA launches: each
    side's results (an in-place op's lists, on copies that keep the storage offsets) and the
    vector groups the emulation ran."""
    def copies():  # type: ignore[no-untyped-def]
        out = []
        for lst in lists:
            kept = []
            for x in lst:
                y = torch.empty(x.numel() + x.storage_offset(), dtype=x.dtype)[x.storage_offset():].view(x.shape)
                kept.append(y.copy_(x))
            out.append(kept)
        return out

    previous = _C._emulate_cuda(False)
    try:
        args = copies()
        result = fn(*args, **kwargs)
        expected = args if in_place else result
        _C._emulate_cuda(True)
        args = copies()
        before = _C._emulated_vector_groups()
        result = fn(*args, **kwargs)
        groups = _C._emulated_vector_groups() - before
        got = args if in_place else result
    finally:
        _C._emulate_cuda(previous)
    return expected, got, groups


def _steps() -> list[torch.Tensor]:
    return [torch.tensor(3.0) for _ in VECTOR_SIZES]


ADAM = dict(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-3, maximize=False, decoupled_weight_decay=True)
SGD = dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.1, nesterov=False, maximize=True)
RMSPROP = dict(lr=0.01, alpha=0.9, eps=1e-3, weight_decay=0.1, momentum=0.9, centered=True, maximize=False)
# In-place steps: (the op, its lists' kinds, whether it takes step counters, its arguments).
VECTOR_STEPS = {
    "adam": (ops.adam_step_, (PARAM, GRAD, ANY, POS, EMPTY), True, dict(ADAM, amsgrad=False)),
    "adam-amsgrad": (ops.adam_step_, (PARAM, GRAD, ANY, POS, POS), True, dict(ADAM, amsgrad=True)),
    "sgd-first-step": (ops.sgd_step_, (PARAM, GRAD, ANY), False, dict(SGD, first_step=True)),
    "sgd-later-step": (ops.sgd_step_, (PARAM, GRAD, ANY), False, dict(SGD, first_step=False)),
    "rmsprop-centered-momentum": (ops.rmsprop_step_, (PARAM, GRAD, POS, UNIT, ANY), True, RMSPROP),
}
# torch.amp: gradients unscaled (stored back unscaled) before the step reads them, or a step skipped.
AMP = {"no-amp": {}, "amp": dict(grad_scale=torch.tensor(8.0), found_inf=torch.tensor(0.0)),
       "amp-skip": dict(grad_scale=torch.tensor(8.0), found_inf=torch.tensor(1.0))}


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("step, amp", [(s, a) for s in VECTOR_STEPS for a in AMP if a == "no-amp" or "adam" in s])
def test_the_vector_path_of_in_place_steps_matches_the_cpu_loops(step, amp, dtype, misaligned):
    fn, kinds, counters, kwargs = VECTOR_STEPS[step]
    lists = _vector_lists(FunctionalCase(step, kinds, kwargs), dtype, misaligned)
    if counters:
        lists.append(_steps())
    expected, got, groups = _both_paths(fn, lists, in_place=True, **kwargs, **AMP[amp])
    _assert_same(got, expected, dtype)
    if amp == "amp-skip":
        _assert_same(got, lists, dtype)  # nothing written
    assert groups == (0 if amp == "amp-skip" else _vector_groups(dtype, misaligned))


def _functional_case(id_: str) -> FunctionalCase:
    return next(c for c in FUNCTIONAL_CASES if c.id == id_)


# Functional ops (each output a fresh tensor, each input read where the caller has it) and their
# backward ops, the widest kernels (Adan's backward has 17 columns, RMSprop's 13).
VECTOR_FUNCTIONAL = ["adam-aTrue-wd0.1-dFalse-mxTrue", "rmsprop-cTrue-m0.9", "adan-s3-wd0.1-npFalse"]


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("dtype", VECTOR_DTYPES, ids=str)
@pytest.mark.parametrize("case", VECTOR_FUNCTIONAL)
def test_the_vector_path_of_functional_and_backward_ops_matches_the_cpu_loops(case, dtype, misaligned):
    c = _functional_case(case)
    lists = _vector_lists(c, dtype, misaligned)
    kept = [[x.clone() for x in lst] for lst in lists]
    expected, got, groups = _both_paths(op(c.op), lists, in_place=False, **c.kwargs)
    _assert_same(got, expected, dtype)
    _assert_same(lists, kept, dtype)  # the inputs are read, not written
    assert groups == _vector_groups(dtype, misaligned)
    gen = torch.Generator().manual_seed(1)
    cotangents = [[torch.randn(t.shape, generator=gen, dtype=torch.float64).to(dtype) for t in lst]
                  for lst in expected]
    saved = [lists[i] for i in FUNCTIONAL_OPS[c.op].saved]
    expected, got, groups = _both_paths(op(c.op + "_backward"), [*cotangents, *saved], in_place=False, **c.kwargs)
    _assert_same(got, expected, dtype)
    assert groups == _vector_groups(dtype, misaligned)


def test_the_emulation_checks_the_vector_paths_invariants():
    # Each of W elements of a group must load and store the same columns (flags decide which, not
    # data), and never load a column it has stored: the registers would then hold the wrong values.
    # Test-only bindings over a chunk and 7 elements of float32 (W = 4): one keeps both rules, one
    # stores only where its value is positive, one loads a column it stored.
    n = CHUNK + 7
    assert _C._emulated_binding_check("AddsOne") == sum(-1.0 if i % 3 == 0 else 1.0 for i in range(n)) + n
    with pytest.raises(RuntimeError, match="StoresWherePositive stores column 0 for some elements of a 4-element "
                                           "group and not others"):
        _C._emulated_binding_check("StoresWherePositive")
    with pytest.raises(RuntimeError, match="LoadsAfterStoring loads column 0 after storing it in the same element"):
        _C._emulated_binding_check("LoadsAfterStoring")
    with pytest.raises(ValueError, match="no probe binding"):
        _C._emulated_binding_check("Adam")


def _launches_per_step_match_torch(name: str, shape: tuple[int, ...], tensors: int, kwargs: dict[str, Any],
                                   launches: int, ours_only: dict[str, Any] | None = None) -> None:
    """Three steps of torch.optim's ``name`` and fused_optim's (with ``ours_only`` besides) on the
    same float64 parameters and gradients: each of ours makes ``launches`` (emulated) CUDA
    launches, counted as a GPU makes them, and the results agree."""
    gen = torch.Generator().manual_seed(3)
    ref = [torch.randn(shape, generator=gen, dtype=torch.float64).requires_grad_() for _ in range(tensors)]
    ours = [p.detach().clone().requires_grad_() for p in ref]
    ref_opt = getattr(torch.optim, name)(ref, foreach=False, **kwargs)
    our_opt = getattr(fused_optim, name)(ours, **kwargs, **(ours_only or {}))
    for _ in range(3):
        for a, b in zip(ref, ours, strict=True):
            a.grad = torch.randn(a.shape, generator=gen, dtype=torch.float64)
            b.grad = a.grad.clone()
        ref_opt.step()
        before = _C._emulated_launches()
        our_opt.step()
        assert _C._emulated_launches() - before == launches
    for a, b in zip(ref, ours, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


def test_a_step_of_two_hundred_tensors_is_one_launch(emulated):
    # Adam on 200 tensors (the host-time benchmark's shape): one kernel launch per step on a GPU,
    # where each launch costs the host microseconds; the result still equals torch.optim's.
    _launches_per_step_match_torch("Adam", (1000,), 200, dict(lr=0.01, weight_decay=0.1), 1)


@pytest.mark.parametrize("shape, launches", [((50,), 4), ((6, 4), 11)], ids=["vectors", "matrices"])
def test_an_adafactor_step_shares_its_launches_between_its_sums(emulated, shape, launches):
    # Adafactor on a few tensors: vectors take the direction pass, the two passes that reduce the
    # norms of p and of u together, and the apply pass (4 launches, not 6); matrices take in
    # addition the three passes of g's row and column norms, one factors pass over the row and
    # column averages together, the products r c and the two passes of the row averages' sums (11,
    # not 14).
    _launches_per_step_match_torch("Adafactor", shape, 5, dict(lr=0.05, weight_decay=0.1), launches)


@pytest.mark.parametrize("name, ours_only", [("NAdam", {}), ("ASGD", {}), ("Adam", dict(capturable=True))])
def test_a_step_that_advances_on_the_device_counts_its_advance_kernel(emulated, name, ours_only):
    # State scalars kept on the device (NAdam's mu_product, ASGD's eta and mu) and capturable step
    # counters advance in a kernel of their own after the step's launch, once no block reads them:
    # two launches on a GPU, and two in the emulation's count.
    _launches_per_step_match_torch(name, (1000,), 5, dict(lr=0.01), 2, ours_only)


_PLAN_ONLY = """
import torch, fused_optim
from fused_optim import _C
p = torch.ones(5000, requires_grad=True)
p.grad = torch.ones(5000)
opt = fused_optim.SGD([p], lr=0.5, momentum=0.9)
before = _C._emulated_launches()
opt.step()
print(_C._emulated_launches() - before, p.detach().sum().item())
"""


def test_the_plan_only_mode_plans_launches_and_runs_no_block():
    # FUSED_OPTIM_EMULATE_CUDA=plan (read when the library loads; bench_host.py --device plan):
    # the CUDA path's host work without its blocks, so a step's launch is counted and its
    # parameters keep their values (5000, not 5000 * (1 - 0.5)); with =1 the same step runs.
    def run(mode: str) -> list[float]:
        env = {**os.environ, "FUSED_OPTIM_EMULATE_CUDA": mode}
        out = subprocess.run([sys.executable, "-c", _PLAN_ONLY], env=env, capture_output=True, text=True, check=True)
        return [float(x) for x in out.stdout.split()]

    assert run("plan") == [1.0, 5000.0]
    assert run("1") == [1.0, 2500.0]
