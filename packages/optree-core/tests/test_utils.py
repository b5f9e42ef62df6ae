"""optree_core.utils: total_order_sorted, safe_zip and unzip2."""

from __future__ import annotations

import pytest

from optree_core.utils import safe_zip, total_order_sorted, unzip2


class Unordered:
    def __init__(self, tag):
        self.tag = tag


def test_total_order_sorted_sorts_comparable_items():
    assert total_order_sorted([]) == []
    assert total_order_sorted((3, 1.5, 2)) == [1.5, 2, 3]
    assert total_order_sorted([3, 1.5, 2], reverse=True) == [3, 2, 1.5]


def test_total_order_sorted_groups_mixed_types_by_qualified_type_name():
    # builtins.float < builtins.int < builtins.str, then by value within each type.
    assert total_order_sorted(["b", 2, 0.5, "a", 1]) == [0.5, 1, 2, "a", "b"]
    assert total_order_sorted(["b", 2, 0.5, "a", 1], reverse=True) == ["b", "a", 2, 1, 0.5]


def test_total_order_sorted_keeps_input_order_of_unorderable_items():
    items = [2, Unordered(1), 1, Unordered(0)]
    assert total_order_sorted(items) == items
    assert total_order_sorted(items, reverse=True) == items  # not reversed: all tie


def test_total_order_sorted_calls_key_once_per_item_and_propagates_its_errors():
    calls = []
    assert total_order_sorted(["bb", 1, "a"], key=lambda x: calls.append(x) or str(x)) == \
        [1, "a", "bb"]
    assert calls == ["bb", 1, "a"]

    def broken(item):
        calls.append(item)
        raise TypeError("key failed")

    calls.clear()
    with pytest.raises(TypeError, match="key failed"):
        total_order_sorted([2, 1], key=broken)
    assert calls == [2]


def test_total_order_sorted_of_dict_items_by_key():
    items = {2: "x", "k": "y", 1.5: "z"}.items()
    assert total_order_sorted(items, key=lambda kv: kv[0]) == [(1.5, "z"), (2, "x"), ("k", "y")]


def test_safe_zip_checks_lengths_eagerly():
    assert list(safe_zip()) == []
    assert list(safe_zip([1, 2], (3, 4), iter("ab"))) == [(1, 3, "a"), (2, 4, "b")]
    with pytest.raises(ValueError, match=r"\[2, 3\]"):
        safe_zip([1, 2], [1, 2, 3])


def test_unzip2_returns_two_tuples_even_when_empty():
    assert unzip2([]) == ((), ())
    assert unzip2({1: "a", 2: "b"}.items()) == ((1, 2), ("a", "b"))
    with pytest.raises(ValueError):
        unzip2([(1, 2, 3)])
