# The compiled module: it loads the ops (torch.ops.fused_optim.*), carries build metadata and
# the ops' unboxed eager calls (csrc/eager_call.cpp), by op name.
from collections.abc import Callable
from typing import Any

BUILD_INFO: dict[str, str | int | bool]
_eager: dict[str, Callable[..., Any]]

# The eager runner's helpers (fused_optim.ops._make_runner; csrc/eager_call.cpp).
def _flatten_lists(lists: Any) -> tuple[tuple[Any, ...], tuple[int, ...], bool] | None: ...
def _split_flat(flat: tuple[Any, ...], sizes: tuple[int, ...]) -> tuple[list[Any], ...]: ...
