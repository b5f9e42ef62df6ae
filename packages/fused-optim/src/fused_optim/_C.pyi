# The compiled module: it loads the ops (torch.ops.fused_optim.*), carries build metadata and
# the ops' unboxed eager calls (csrc/eager_call.cpp), by op name.
from collections.abc import Callable
from typing import Any

BUILD_INFO: dict[str, str | int | bool]
_eager: dict[str, Callable[..., Any]]
