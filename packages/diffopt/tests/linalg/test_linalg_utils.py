"""diffopt.linalg.utils: normalize_matvec and cat_shapes."""

import pytest
import torch

from diffopt.linalg.utils import cat_shapes, normalize_matvec


def test_matrices_act_leafwise_like_matmul():
    g = torch.Generator().manual_seed(0)
    A = [torch.randn(4, 4, generator=g) for _ in range(3)]
    x = [torch.randn(4, 1, generator=g), torch.randn(4, generator=g), torch.randn(4, 2, generator=g)]
    for got, M, v in zip(normalize_matvec(A)(x), A, x):
        assert torch.equal(got, M @ v)  # bit for bit: the same product


def test_a_leaf_of_other_shape_is_treated_as_the_flat_vector():
    M = torch.arange(16.0).reshape(4, 4)
    x = torch.arange(4.0).reshape(2, 2)
    torch.testing.assert_close(normalize_matvec(M)(x), (M @ x.reshape(-1)).reshape(2, 2))


def test_callables_pass_through_and_bad_operators_are_refused():
    def f(v):
        return 2 * v

    assert normalize_matvec(f) is f
    with pytest.raises(ValueError, match="square"):
        normalize_matvec(torch.ones(2, 3))
    with pytest.raises(TypeError, match="callable"):
        normalize_matvec("A")
    with pytest.raises(ValueError):
        normalize_matvec([torch.eye(2)])([torch.ones(2), torch.ones(2)])  # leaf count differs
    with pytest.raises(ValueError, match="cannot act"):
        normalize_matvec(torch.eye(2))(torch.ones(3))


def test_cat_shapes():
    assert cat_shapes([torch.zeros(2, 3), {"b": torch.zeros(())}, torch.zeros(5)]) == (2, 3, 5)
