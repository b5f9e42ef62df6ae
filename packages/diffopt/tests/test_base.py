"""diffopt.base's state types and diffopt.typing's TorchOpt aliases."""

import typing

import torch

import diffopt
from diffopt.base import EmptyState, UninitializedState


def test_uninitialized_state_is_an_empty_pytree_node():
    state = UninitializedState()
    assert state == () and state._fields == ()
    assert diffopt.pytree.tree_leaves({"s": state, "x": torch.ones(1)}) == [torch.ones(1)]
    assert not isinstance(state, EmptyState)


def test_typing_aliases_describe_torch_types():
    from diffopt import typing as dt

    assert dt.Tensor is torch.Tensor and dt.Size is torch.Size
    assert dt.Distribution is torch.distributions.Distribution
    assert dt.Future is torch.futures.Future
    assert set(typing.get_args(dt.Device)) == {torch.device, str, int}
    assert typing.get_args(dt.OptionalTensor) == (torch.Tensor, type(None))
    assert typing.get_args(dt.TensorContainer) == (str, dt.OptionalTensor)
    assert isinstance(torch.distributions.Normal(0.0, 1.0), dt.Samplable)
    assert not isinstance(lambda shape: torch.zeros(shape), dt.Samplable)
    assert dt.RRef is torch.distributed.rpc.RRef
