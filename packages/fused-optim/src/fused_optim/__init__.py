"""fused-optim: fused CPU/CUDA optimizer kernels for PyTorch.

* Drop-in optimizers: ``fused_optim.Adam``, ``AdamW``, ``SGD``, ``RMSprop``, ``Adagrad``,
  ``Adadelta``, ``Adamax``, ``RAdam``, ``NAdam``, ``Rprop``, ``ASGD``, ``Adafactor`` take the same
  arguments as their ``torch.optim`` twins and share their ``state_dict`` layout, with one
  multi-tensor kernel per step; ``Lion`` and ``Adan``, which torch.optim lacks, follow their papers;
  ``Muon`` (matrices) fuses its element-wise passes and batches its Newton-Schulz iteration per shape.
* Differentiable out-of-place updates for meta-learning: :mod:`fused_optim.functional`
  (``adam_update``, ``adam_direction``...), one fused backward node per call.
* The custom ops themselves: ``torch.ops.fused_optim.*`` (see :mod:`fused_optim.ops`).

    >>> import torch
    >>> import fused_optim
    >>> w = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    >>> opt = fused_optim.SGD([w], lr=0.1, momentum=0.9)
    >>> w.grad = torch.tensor([1.0, 1.0])
    >>> opt.step()
    >>> w.detach(), sorted(opt.state[w])
    (tensor([ 0.9000, -1.1000]), ['momentum_buffer'])
"""

# First, before anything loads _C: a torch older than the stable ABI it targets gets an ImportError
# naming both versions (see _torch_abi.py), not an undefined-symbol error.
from fused_optim._torch_abi import check_running_torch

check_running_torch()

from fused_optim import functional, ops  # noqa: E402
from fused_optim._native import BUILD_INFO  # noqa: E402
from fused_optim.optim import (  # noqa: E402
    ASGD,
    SGD,
    Adadelta,
    Adafactor,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    Adan,
    Lion,
    Muon,
    NAdam,
    RAdam,
    RMSprop,
    Rprop,
)
from fused_optim.version import __version__  # noqa: E402

__all__ = [
    "ASGD",
    "BUILD_INFO",
    "SGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Adan",
    "Lion",
    "Muon",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "__version__",
    "functional",
    "ops",
]
