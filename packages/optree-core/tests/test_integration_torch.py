"""optree_core's torch integration: tree_ravel to one flat tensor and back, gradients included."""

from __future__ import annotations

import pytest
from integration_modules import integration_module

torch = pytest.importorskip("torch")


@pytest.fixture
def tree_ravel():
    return integration_module("torch").tree_ravel


def test_ravel_concatenates_in_leaf_order_and_promotes_dtype(tree_ravel):
    tree = {
        "b": [torch.ones(2, 2, dtype=torch.float32), torch.tensor(5.0, dtype=torch.float64)],
        "a": torch.arange(3.0),
    }
    flat, unravel = tree_ravel(tree)
    assert flat.dtype == torch.float64
    assert flat.tolist() == [0.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 5.0]
    back = unravel(flat * 2)
    assert list(back) == ["b", "a"]
    assert back["a"].tolist() == [0.0, 2.0, 4.0]
    assert back["b"][0].dtype == torch.float32
    assert back["b"][0].shape == (2, 2)
    assert back["b"][1].shape == ()
    assert back["b"][1].item() == 10.0


def test_ravel_is_differentiable(tree_ravel):
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    flat, unravel = tree_ravel({"w": w, "b": b})
    (flat * torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64)).sum().backward()
    # Leaf order is b, w (sorted keys).
    assert b.grad.item() == 10.0
    assert w.grad.tolist() == [20.0, 30.0]
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    out = unravel(x)
    (out["w"].sum() * 2 + out["b"] * 5).backward()
    assert x.grad.tolist() == [5.0, 2.0, 2.0]


def test_unravel_rejects_wrong_shape(tree_ravel):
    _, unravel = tree_ravel({"a": torch.zeros(4)})
    with pytest.raises(ValueError, match="4"):
        unravel(torch.zeros(3))


def test_ravel_rejects_non_tensor_leaves(tree_ravel):
    with pytest.raises(ValueError, match="tensor"):
        tree_ravel({"a": 1})


def test_ravel_empty_tree(tree_ravel):
    flat, unravel = tree_ravel({})
    assert flat.shape == (0,)
    assert unravel(flat) == {}


def test_unravel_of_a_mixed_dtype_tree_needs_the_flat_dtype(tree_ravel):
    # The pieces are cast back to the leaves' dtypes, exact only from the flat dtype: a complex
    # vector cast to the real leaves would silently drop the imaginary parts.
    flat, unravel = tree_ravel([torch.ones(2), torch.zeros(1, dtype=torch.int64)])
    assert flat.dtype == torch.float32
    with pytest.raises(ValueError, match="dtype"):
        unravel(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(ValueError, match="dtype"):
        unravel(torch.arange(3))
    back = unravel(torch.tensor([0.5, 1.5, 2.0]))
    assert back[0].tolist() == [0.5, 1.5] and back[1].dtype == torch.int64


def test_unravel_of_a_single_dtype_tree_keeps_the_given_dtype(tree_ravel):
    _, unravel = tree_ravel([torch.ones(2), torch.zeros(1)])
    back = unravel(torch.tensor([1 + 2j, 3j, 4], dtype=torch.complex64))
    assert [t.dtype for t in back] == [torch.complex64, torch.complex64]
    assert back[0].tolist() == [1 + 2j, 3j]  # nothing dropped


def test_unravel_of_an_empty_tree_checks_its_argument(tree_ravel):
    _, unravel = tree_ravel([])
    with pytest.raises(ValueError, match="shape"):
        unravel(torch.zeros(2))
    with pytest.raises(ValueError, match="Expected a tensor"):
        unravel("not a tensor")
