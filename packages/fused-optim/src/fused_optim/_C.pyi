# The compiled module: it loads the ops (torch.ops.fused_optim.*), carries build metadata and
# the ops' unboxed eager calls (csrc/eager_call.cpp), by op name.
from collections.abc import Callable, Sequence
from typing import Any

BUILD_INFO: dict[str, str | int | bool]
_eager: dict[str, Callable[..., Any]]

# The eager runner's helpers (fused_optim.ops._make_runner; csrc/eager_call.cpp).
def _flatten_lists(lists: Any) -> tuple[tuple[Any, ...], tuple[int, ...], bool] | None: ...
def _split_flat(flat: tuple[Any, ...], sizes: tuple[int, ...]) -> tuple[list[Any], ...]: ...

# The CUDA launch plan (csrc/cuda/launch_plan.h), for tests: its limits, the launches of tensors of
# given element counts (each a list of (tensor, first chunk, chunks)), and the test mode that runs
# every CPU call through the CUDA launches emulated on the host (returns the previous setting).
CUDA_LAUNCH: dict[str, int]
def _cuda_launch_plan(numel: Sequence[int], /) -> list[list[tuple[int, int, int]]]: ...
def _emulate_cuda(enable: bool | None = None, /) -> bool: ...
def _emulated_launches() -> int: ...
def _emulated_grid_limit(max_blocks: int, /) -> int: ...
