"""Gradients through remote calls (``torch.distributed.autograd`` with torch.autograd's manners).

Inside a :func:`context`, every RPC records send/receive functions, so a loss computed from
results gathered from workers back-propagates into the workers' graphs and on to the tensors
the caller sent. :func:`backward` accumulates into ``.grad`` like :func:`torch.autograd.backward`
(and only what this call added, even when the context already holds gradients from an earlier
backward); :func:`grad` returns the gradients like :func:`torch.autograd.grad`.

Send the *caller's* tensors through a differentiable operation (``diffopt.module_clone(net,
by='clone')``, ``param.clone()``): RPC detaches ``nn.Parameter`` leaves it sends directly.

Example:
    >>> import torch
    >>> import torch.distributed.rpc as rpc
    >>> from diffopt.distributed import auto_init_rpc
    >>> x = torch.tensor([0.5, -1.0], requires_grad=True)
    >>> @auto_init_rpc()
    ... def main():  # a world of one worker: worker0 computes 2 * x for us
    ...     with context() as ctx:
    ...         y = rpc.rpc_sync('worker0', torch.mul, args=(x, 2.0))
    ...         return grad(ctx, y.square().sum(), [x])  # d/dx (2x)^2 = 8x
    >>> main()
    (tensor([ 4., -8.]),)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

__all__ = ["DistAutogradContext", "backward", "context", "get_gradients", "grad", "is_available"]

_GRAD_LOCK = threading.Lock()


def is_available() -> bool:
    """Whether this PyTorch build has distributed autograd.

    Returns:
        ``True`` when ``torch.distributed`` and ``torch.distributed.autograd`` are both built in.

    Example:
        >>> import torch
        >>> is_available() == (torch.distributed.is_available() and torch.distributed.autograd.is_available())
        True
    """
    import torch.distributed as dist

    if not dist.is_available():
        return False
    import torch.distributed.autograd as dist_autograd

    return dist_autograd.is_available()


if is_available():
    from torch.distributed.autograd import DistAutogradContext, context, get_gradients
else:  # pragma: no cover - PyTorch built without distributed support

    def _unavailable(*args, **kwargs):
        raise RuntimeError("torch.distributed.autograd is not available in this PyTorch build")

    DistAutogradContext = context = get_gradients = _unavailable


def _as_tensors(name: str, value: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    tensors = [value] if isinstance(value, torch.Tensor) else list(value)
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError(f"{name} must be a tensor or a non-empty sequence of tensors")
    return tensors


def _roots(tensors: list[torch.Tensor], grad_tensors: Sequence[torch.Tensor] | None) -> list:
    """Scalar roots (distributed autograd starts only from scalars): ``<t, g>`` when ``t`` has a
    given output gradient ``g``."""
    if grad_tensors is None:
        for t in tensors:
            if t.numel() != 1:
                raise ValueError(f"distributed backward starts from scalars; got a tensor of "
                                 f"shape {tuple(t.shape)}: pass grad_outputs, or reduce it first")
        return [t.reshape(()) for t in tensors]
    grads = _as_tensors("grad_outputs", grad_tensors)
    if len(grads) != len(tensors):
        raise ValueError(f"got {len(grads)} grad_outputs for {len(tensors)} outputs")
    roots = []
    for t, g in zip(tensors, grads):
        if g.shape != t.shape:
            raise ValueError(f"grad_outputs shape {tuple(g.shape)} does not match the output's "
                             f"{tuple(t.shape)}")
        roots.append((t * g.detach()).sum())
    return roots


def _check_roots(tensors: list[torch.Tensor]) -> None:
    for t in tensors:
        if not t.requires_grad:
            raise RuntimeError("element of the tensors to differentiate does not require grad "
                               "and has no grad_fn (was it computed outside the autograd context, "
                               "or from detached parameters?)")


def _run(context_id: int, roots: list[torch.Tensor], retain_graph: bool) -> dict:
    """Backward in ``context_id``; the gradients this call added, per leaf tensor."""
    import torch.distributed.autograd as dist_autograd

    before = {t: g.clone() for t, g in dist_autograd.get_gradients(context_id).items()}
    dist_autograd.backward(context_id, roots, retain_graph=retain_graph)
    added = {}
    for t, g in dist_autograd.get_gradients(context_id).items():
        previous = before.get(t)
        added[t] = g if previous is None else g - previous
    return added


def backward(autograd_ctx_id: int, tensors: torch.Tensor | Sequence[torch.Tensor],
             retain_graph: bool = False,
             inputs: torch.Tensor | Sequence[torch.Tensor] | None = None) -> None:
    """Back-propagate from ``tensors`` across workers and accumulate into the leaves' ``.grad``.

    Args:
        autograd_ctx_id: the id from ``with context() as autograd_ctx_id``.
        tensors: scalar tensors to differentiate (their sum).
        retain_graph: keep the graphs (on every worker) for another backward.
        inputs: accumulate only into these leaves (default: every leaf on this worker).

    Raises:
        ValueError: if a tensor is not a scalar.
        RuntimeError: if a tensor does not require grad.

    Example:
        >>> import torch
        >>> import torch.distributed.rpc as rpc
        >>> from diffopt.distributed import auto_init_rpc
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> @auto_init_rpc()
        ... def main():  # a world of one worker: worker0 computes w * w for us
        ...     with context() as ctx:
        ...         square = rpc.rpc_sync('worker0', torch.mul, args=(w, w))
        ...         backward(ctx, square.sum())
        >>> main()
        >>> w.grad
        tensor([2., 4.])
    """
    roots = _as_tensors("tensors", tensors)
    _check_roots(roots)
    added = _run(autograd_ctx_id, _roots(roots, None), retain_graph)
    targets = added.keys() if inputs is None else _as_tensors("inputs", inputs)
    with _GRAD_LOCK:  # backward may run in several threads (one per context)
        for leaf in targets:
            g = added.get(leaf)
            if g is None:
                continue
            leaf.grad = g.detach().clone() if leaf.grad is None else leaf.grad + g


def grad(autograd_ctx_id: int, outputs: torch.Tensor | Sequence[torch.Tensor],
         inputs: torch.Tensor | Sequence[torch.Tensor], retain_graph: bool = False,
         allow_unused: bool = False, *,
         grad_outputs: torch.Tensor | Sequence[torch.Tensor] | None = None) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs``, across workers.

    Args:
        autograd_ctx_id: the id from ``with context() as autograd_ctx_id``.
        outputs: tensors to differentiate (scalars unless ``grad_outputs`` is given).
        inputs: leaf tensors of this worker that require grad.
        retain_graph: keep the graphs (on every worker) for another backward.
        allow_unused: give ``None`` for an input the outputs do not depend on instead of raising.
        grad_outputs: keyword-only (TorchOpt's positional order has no slot for it): the vector
            of the vector-Jacobian product, one per output.

    Returns:
        A tuple with one gradient per input.

    Raises:
        ValueError: if an input is not a leaf that requires grad.
        RuntimeError: if an input is unused and ``allow_unused`` is ``False``.

    Example:
        >>> import torch
        >>> import torch.distributed.rpc as rpc
        >>> from diffopt.distributed import auto_init_rpc
        >>> @auto_init_rpc()
        ... def main():  # a world of one worker: worker0 computes w ** 3 for us
        ...     w = torch.tensor([1.0, 2.0], requires_grad=True)
        ...     with context() as ctx:
        ...         cube = rpc.rpc_sync('worker0', torch.pow, args=(w, 3))
        ...         return grad(ctx, cube, [w], grad_outputs=[torch.ones(2)])
        >>> main()  # 3 w^2, and w.grad is left untouched
        (tensor([ 3., 12.]),)
    """
    outs = _as_tensors("outputs", outputs)
    _check_roots(outs)
    ins = _as_tensors("inputs", inputs)
    for i, t in enumerate(ins):
        if not (t.requires_grad and t.is_leaf):
            raise ValueError(f"inputs[{i}] must be a leaf tensor that requires grad: distributed "
                             f"autograd only accumulates gradients into leaves")
    added = _run(autograd_ctx_id, _roots(outs, grad_outputs), retain_graph)
    result = []
    for i, t in enumerate(ins):
        g = added.get(t)
        if g is None and not allow_unused:
            raise RuntimeError(f"inputs[{i}] was not used to compute the outputs (pass "
                               f"allow_unused=True to get None for it)")
        result.append(g)
    return tuple(result)
