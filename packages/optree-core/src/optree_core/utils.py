"""Small helpers shared by the pytree functions (and used by optree's clients, e.g. torch's).

    >>> from optree_core.utils import safe_zip, total_order_sorted, unzip2
    >>> total_order_sorted([3, 'b', 1, 'a'])
    [1, 3, 'a', 'b']
    >>> list(safe_zip('ab', [1, 2]))
    [('a', 1), ('b', 2)]
    >>> unzip2([('a', 1), ('b', 2)])
    (('a', 'b'), (1, 2))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["safe_zip", "total_order_sorted", "unzip2"]

T = TypeVar("T")
S = TypeVar("S")


def _type_then_value(sort_key: Any) -> tuple[str, Any]:
    cls = type(sort_key)
    return f"{cls.__module__}.{cls.__qualname__}", sort_key


def total_order_sorted(
    iterable: Iterable[T],
    /,
    *,
    key: Callable[[T], Any] | None = None,
    reverse: bool = False,
) -> list[T]:
    """Sort items that may not compare with each other (e.g. the keys of a dict).

    Items are sorted by value when they compare; otherwise by the qualified name of their type,
    then by value within a type; when even that fails (instances of a class without ordering),
    the input order is kept, unreversed, as a stable sort would keep items that tie.

    Args:
        iterable: The items to sort.
        key: Called once per item to give its sort key (its exceptions propagate).
        reverse: Sort in descending order.

    Returns:
        A new list.

    >>> total_order_sorted([2, 'x', 1.5, 'a'])
    [1.5, 2, 'a', 'x']
    >>> total_order_sorted([2, 'x', 1, 'a'], reverse=True)
    ['x', 'a', 2, 1]
    """
    items = list(iterable)
    sort_keys = items if key is None else [key(item) for item in items]
    # Sort positions, never the list itself: a failed comparison leaves no partial order behind.
    positions = range(len(items))
    for order_key in (sort_keys.__getitem__, lambda i: _type_then_value(sort_keys[i])):
        try:
            order = sorted(positions, key=order_key, reverse=reverse)
        except TypeError:
            continue
        return [items[i] for i in order]
    return items


def safe_zip(*sequences: Iterable[Any]) -> zip[tuple[Any, ...]]:
    """``zip`` that first checks every argument has the same length.

    Raises:
        ValueError: naming the lengths, when they differ.

    >>> safe_zip([1, 2], [3])
    Traceback (most recent call last):
        ...
    ValueError: safe_zip got iterables of different lengths: [2, 1]
    """
    materialized = [s if isinstance(s, Sequence) else list(s) for s in sequences]
    lengths = [len(s) for s in materialized]
    if len(set(lengths)) > 1:
        raise ValueError(f"safe_zip got iterables of different lengths: {lengths}")
    return zip(*materialized)


def unzip2(pairs: Iterable[tuple[T, S]], /) -> tuple[tuple[T, ...], tuple[S, ...]]:
    """Split an iterable of pairs into a tuple of firsts and a tuple of seconds.

    Unlike ``zip(*pairs)``, an empty input gives two empty tuples, and an item that is not a
    pair raises ``ValueError``.

    Args:
        pairs: Any iterable of 2-item iterables (e.g. ``dict.items()``).

    >>> unzip2({'a': 1, 'b': 2}.items())
    (('a', 'b'), (1, 2))
    >>> unzip2({}.items())
    ((), ())
    """
    firsts: list[T] = []
    seconds: list[S] = []
    for first, second in pairs:
        firsts.append(first)
        seconds.append(second)
    return tuple(firsts), tuple(seconds)
