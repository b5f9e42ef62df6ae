"""optree_core's numpy integration: tree_ravel to one flat array and back."""

from __future__ import annotations

import pytest
from integration_modules import integration_module

np = pytest.importorskip("numpy")


@pytest.fixture
def tree_ravel():
    return integration_module("numpy").tree_ravel


def test_ravel_concatenates_in_leaf_order_and_promotes_dtype(tree_ravel):
    tree = {
        "b": [np.ones((2, 2), dtype=np.float32), np.array(5, dtype=np.int32)],
        "a": np.arange(3.0),
    }
    flat, unravel = tree_ravel(tree)
    np.testing.assert_array_equal(flat, [0.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 5.0])
    assert flat.dtype == np.float64
    assert flat.shape == (8,)
    back = unravel(flat * 2)
    assert list(back) == ["b", "a"]
    np.testing.assert_array_equal(back["a"], [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(back["b"][0], np.full((2, 2), 2.0))
    assert back["b"][0].dtype == np.float32
    assert back["b"][1].dtype == np.int32
    assert back["b"][1].shape == ()
    assert int(back["b"][1]) == 10


def test_unravel_rejects_wrong_shape(tree_ravel):
    _, unravel = tree_ravel({"a": np.zeros(4)})
    with pytest.raises(ValueError, match="4"):
        unravel(np.zeros(3))


def test_ravel_empty_tree(tree_ravel):
    flat, unravel = tree_ravel({})
    assert flat.shape == (0,)
    assert unravel(flat) == {}


def test_ravel_does_not_modify_input(tree_ravel):
    a = np.arange(3.0)
    flat, _ = tree_ravel([a])
    flat[:] = -1
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])


def test_unravel_rejects_a_dtype_that_loses_information(tree_ravel):
    # A complex vector cast to the real leaves would silently drop the imaginary parts.
    _, unravel = tree_ravel([np.ones(2), np.zeros(1)])
    with pytest.raises(TypeError, match="complex"):
        unravel(np.ones(3, dtype=np.complex128))
    back = unravel(np.arange(3))  # an integer vector casts to float within its kind
    assert [a.tolist() for a in back] == [[0.0, 1.0], [2.0]]
