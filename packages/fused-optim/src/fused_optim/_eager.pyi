# The optional fast path (csrc/eager_module.cpp, csrc/eager_call.cpp), for the torch release it was
# compiled against: the ops' unboxed eager calls by op name, and the eager runner's helpers
# (fused_optim.ops._make_runner). fused_optim._native decides whether it is imported.
from collections.abc import Callable
from typing import Any

_eager: dict[str, Callable[..., Any]]

def _flatten_lists(lists: Any) -> tuple[tuple[Any, ...], tuple[int, ...], bool] | None: ...
def _split_flat(flat: tuple[Any, ...], sizes: tuple[int, ...]) -> tuple[list[Any], ...]: ...
def _grads_if_same(params: Any, kept: list[Any], /) -> list[Any] | None: ...
