# The compiled module on torch's stable ABI (csrc/registration.cpp): importing it registers the ops
# (torch.ops.fused_optim.*); it carries build metadata and the names of the ops, in order.
from collections.abc import Sequence
from typing import Any

BUILD_INFO: dict[str, str | int | bool]
OPS: tuple[str, ...]

# The CUDA launch plan (csrc/cuda/launch_plan.h), for tests: its limits, the launches of tensors of
# given element counts (each a list of (tensor, first chunk, chunks)), and the test mode that runs
# every CPU call through the CUDA launches emulated on the host (returns the previous setting).
CUDA_LAUNCH: dict[str, int]
def _cuda_launch_plan(numel: Sequence[int], /) -> list[list[tuple[int, int, int]]]: ...
def _emulate_cuda(enable: bool | None = None, /) -> bool: ...
def _emulated_launches() -> int: ...
def _emulated_grid_limit(max_blocks: int, /) -> int: ...

# Steps that ran a kept table so far (csrc/kept_step.h), for tests: that the step reuse took effect.
def _kept_table_steps() -> int: ...

# fused_optim.optim's step reuse: whether every parameter's state (a dict of dicts) holds exactly
# the `kept` values, in order, by identity.
def _same_state(state: dict[Any, Any], kept: list[Any], /) -> bool: ...
