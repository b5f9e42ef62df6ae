"""Call a module with other tensors in its parameter / buffer slots, then put its own back.

:func:`swap_state` puts tensors into a module by dotted name (``'0.weight'``, ``'bn.running_mean'``)
and returns the ones it replaced; :func:`reparametrize` (also spelled :func:`reparameterize`) does
so for the length of a ``with`` block and restores the originals on the way out, exception or not.
This is how a functional call of a stateful module is written without copying it.

Example:
    >>> import torch
    >>> net = torch.nn.Linear(1, 1)
    >>> with reparametrize(net, {'weight': torch.tensor([[2.0]]), 'bias': torch.tensor([1.0])}):
    ...     net(torch.tensor([[3.0]]))
    tensor([[7.]])
    >>> isinstance(net.weight, torch.nn.Parameter)
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import nn

__all__ = ["reparameterize", "reparametrize", "swap_state"]

# Stands for "the module had no such attribute": restoring it deletes the attribute again.
_MISSING = object()


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    *path, attr = name.split(".")
    owner = module
    for depth, part in enumerate(path):
        try:
            owner = getattr(owner, part)
        except AttributeError:
            prefix = ".".join(path[:depth + 1])
            raise AttributeError(
                f"swap_state: {type(module).__name__} has no submodule {prefix!r} (from {name!r})"
            ) from None
    return owner, attr


def _swap_one(module: nn.Module, name: str, value: object, allow_missing: bool) -> object:
    owner, attr = _owner(module, name)
    original = getattr(owner, attr, _MISSING)
    if original is _MISSING and not allow_missing:
        raise AttributeError(f"swap_state: {type(module).__name__} has no attribute {name!r}; "
                             f"pass allow_missing=True to add it for the swap")
    # Write into the table that holds the name, so a Parameter slot can take a plain tensor
    # (nn.Module.__setattr__ refuses that) and a buffer stays a buffer.
    for table in ("_parameters", "_buffers", "_meta_parameters"):
        slots = owner.__dict__.get(table)
        if slots is not None and attr in slots:
            if value is _MISSING:
                del slots[attr]
            else:
                slots[attr] = value
            return original
    if value is _MISSING:
        delattr(owner, attr)
    else:
        setattr(owner, attr, value)
    return original


def swap_state(
    module: nn.Module,
    named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
    allow_missing: bool = False,
) -> dict[str, torch.Tensor]:
    """Put each tensor into ``module`` under its dotted name; return the tensors it replaced.

    Parameters, buffers and meta-parameters are replaced in their own tables (the new tensor need
    not be an :class:`~torch.nn.Parameter`); any other name is set as a plain attribute. The swap
    is all or nothing: if one name fails, the ones already swapped are put back before the error
    propagates. Passing the returned dict back to :func:`swap_state` undoes the swap.

    Args:
        module: the module to modify in place.
        named_tensors: ``{dotted_name: tensor}``, or an iterable of ``(dotted_name, tensor)``.
        allow_missing: allow names the module does not have yet; they are added, and the returned
            dict marks them so that swapping it back removes them again.

    Returns:
        ``{dotted_name: previous_value}`` for every name swapped.

    Raises:
        AttributeError: if a name (or a submodule on its path) does not exist and
            ``allow_missing`` is false.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 1))
        >>> old = swap_state(net, {'0.bias': torch.tensor([5.0])})
        >>> net[0].bias, type(old['0.bias']).__name__
        (tensor([5.]), 'Parameter')
        >>> _ = swap_state(net, old)  # undo
        >>> isinstance(net[0].bias, torch.nn.Parameter)
        True
    """
    items = list(named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors)
    replaced: dict[str, object] = {}
    try:
        for name, tensor in items:
            if name in replaced:
                raise ValueError(f"swap_state: the name {name!r} is given twice")
            replaced[name] = _swap_one(module, name, tensor, allow_missing)
    except BaseException:
        for name, original in reversed(list(replaced.items())):
            _swap_one(module, name, original, True)
        raise
    return replaced  # type: ignore[return-value]


@contextlib.contextmanager
def reparametrize(
    module: nn.Module,
    named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
    allow_missing: bool = False,
) -> Iterator[nn.Module]:
    """Within the ``with`` block, ``module`` holds ``named_tensors``; afterwards its own again.

    The original tensors come back when the block exits, also when it raises. Autograd flows into
    the swapped-in tensors, so this is a functional call of the module: the loss computed inside is
    a function of the tensors passed, not of the module's parameters.

    Args:
        module: the module to reparametrize.
        named_tensors: ``{dotted_name: tensor}``, or an iterable of ``(dotted_name, tensor)``
            (names as in ``module.named_parameters()`` / ``named_buffers()``).
        allow_missing: allow (and afterwards remove again) names the module does not have.

    Yields:
        ``module`` itself, holding the new tensors.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(2, 1, bias=False)
        >>> w = torch.ones(1, 2, requires_grad=True)
        >>> with reparametrize(net, [('weight', w)]) as swapped:
        ...     loss = swapped(torch.tensor([[1.0, 2.0]])).sum()
        >>> torch.autograd.grad(loss, w)[0]
        tensor([[1., 2.]])
        >>> net.weight is w
        False
    """
    replaced = swap_state(module, named_tensors, allow_missing=allow_missing)
    try:
        yield module
    finally:
        swap_state(module, replaced, allow_missing=True)


reparameterize = reparametrize
