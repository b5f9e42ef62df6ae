"""Put tensors in a module's parameter / meta-parameter / buffer slots by dotted name.

Implicit and zero-order modules evaluate a module's methods at other values of its parameters
(the solver's detached iterates, perturbed copies...) without rebuilding the module: these helpers
swap the tensors in place in the slots that hold them, and :func:`reparametrize` puts the old ones
back afterwards, even on error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch import nn

__all__ = ["reparametrize", "swap_tensors"]


def _slot(module: nn.Module, name: str) -> tuple[dict, str]:
    *path, attr = name.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    for table in ("_meta_parameters", "_parameters", "_buffers"):
        slots = owner.__dict__.get(table)
        if slots is not None and attr in slots:
            return slots, attr
    raise AttributeError(
        f"{type(module).__name__} has no parameter, meta-parameter or buffer {name!r}"
    )


def swap_tensors(module: nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> list:
    """Put each tensor in the slot named by its dotted name; return the tensors it replaced."""
    replaced = []
    for name, tensor in named_tensors:
        slots, attr = _slot(module, name)
        replaced.append((name, slots[attr]))
        slots[attr] = tensor
    return replaced


@contextlib.contextmanager
def reparametrize(
    module: nn.Module, named_tensors: Iterable[tuple[str, torch.Tensor]]
) -> Iterator[nn.Module]:
    """Within the block, the module holds the given tensors; afterwards its own ones again."""
    replaced: list = []
    try:
        replaced = swap_tensors(module, named_tensors)
        yield module
    finally:
        swap_tensors(module, reversed(replaced))
