"""The building blocks the aliases share, as a public module (TorchOpt's ``torchopt.alias.utils``).

The implementations live in :mod:`diffopt.alias._utils`; this module is where users (and code
written for TorchOpt) import them from. It also holds the process-wide ``use_chain_flat`` switch.

Example:
    >>> import torch
    >>> from diffopt.alias.utils import scale_by_neg_lr
    >>> tx = scale_by_neg_lr(0.5)
    >>> tx.update([torch.tensor(2.0)], tx.init(None))[0]
    [tensor(-1.)]
"""

from __future__ import annotations

import threading

from diffopt.alias._utils import flip_sign_and_add_weight_decay, scale_by_neg_lr

__all__ = ["flip_sign_and_add_weight_decay", "scale_by_neg_lr"]

# TorchOpt's aliases chain their transforms either over pytrees or over flattened leaf lists,
# chosen by this switch, and its tests run every optimizer both ways. diffopt's transforms always
# work on flattened leaves (``chain.flat`` is ``chain``), so both settings give the same results;
# the switch is kept, thread-safe, so code that sets and reads it behaves as it did.
_USE_CHAIN_FLAT_LOCK = threading.Lock()
_USE_CHAIN_FLAT = True


def _set_use_chain_flat(use_chain_flat: bool) -> None:
    """Record whether aliases should chain over flattened leaves (the results are the same).

    Args:
        use_chain_flat: the new setting; must be a bool.

    Example:
        >>> _set_use_chain_flat(False); _get_use_chain_flat()
        False
        >>> _set_use_chain_flat(True)
    """
    global _USE_CHAIN_FLAT
    if not isinstance(use_chain_flat, bool):
        raise TypeError(f"use_chain_flat must be a bool, got {type(use_chain_flat).__name__}")
    with _USE_CHAIN_FLAT_LOCK:
        _USE_CHAIN_FLAT = use_chain_flat


def _get_use_chain_flat() -> bool:
    """The current ``use_chain_flat`` setting (True unless :func:`_set_use_chain_flat` changed it).

    Example:
        >>> _get_use_chain_flat()
        True
    """
    with _USE_CHAIN_FLAT_LOCK:
        return _USE_CHAIN_FLAT
