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


def test_unravel_of_a_mixed_dtype_tree_needs_the_flat_dtype(tree_ravel):
    # The pieces are cast back to the leaves' dtypes, exact only from the flat dtype: a complex
    # vector cast to the real leaves would silently drop the imaginary parts.
    _, unravel = tree_ravel([np.ones(2), np.zeros(1, dtype=np.int32)])
    with pytest.raises(ValueError, match="dtype"):
        unravel(np.ones(3, dtype=np.complex128))
    back = unravel(np.array([0.0, 1.0, 2.0]))
    assert back[0].tolist() == [0.0, 1.0] and back[1].dtype == np.int32


def test_unravel_of_a_single_dtype_tree_keeps_the_given_dtype(tree_ravel):
    _, unravel = tree_ravel([np.ones(2), np.zeros(1)])
    back = unravel(np.array([1 + 2j, 3j, 4]))
    assert [a.dtype for a in back] == [np.complex128, np.complex128]
    assert back[0].tolist() == [1 + 2j, 3j]
    with pytest.raises(ValueError, match="Expected an array"):
        unravel([1.0, 2.0, 3.0])


def test_python_scalars_keep_their_own_precision(tree_ravel):
    flat, unravel = tree_ravel({"a": np.array([1, 2], dtype=np.int8), "b": 200})
    assert int(unravel(flat)["b"]) == 200  # not wrapped around to int8
    with pytest.raises(ValueError, match="All leaves must be arrays"):
        tree_ravel({"a": "text"})


def test_integrations_package_lists_its_submodules_and_keeps_the_old_name():
    import optree_core.integrations as integrations

    assert dir(integrations) == ["SUBMODULES", "attrs", "jax", "numpy", "torch"]
    with pytest.raises(AttributeError):
        integrations.not_a_library  # noqa: B018
    from optree_core.integration.numpy import tree_ravel as old

    assert old is integrations.numpy.tree_ravel
