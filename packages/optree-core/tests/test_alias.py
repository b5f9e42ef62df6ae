"""install_as_optree: `import optree` gives optree_core, and torch.utils._cxx_pytree runs on it.

Each check runs in a fresh interpreter: the alias and torch's pytree flags are process-wide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_optree_resolves_to_optree_core_modules():
    out = run_python(
        """
        import optree_core
        optree_core.install_as_optree(torch=False)
        optree_core.install_as_optree(torch=False)  # a second call changes nothing
        import optree, optree.ops, optree.utils, optree._C
        from optree.registry import register_pytree_node
        assert optree is optree_core and optree.ops is optree_core.ops
        assert optree.utils is optree_core.utils and optree._C is optree_core._C
        assert register_pytree_node is optree_core.register_pytree_node
        try:
            import optree.no_such_module
        except ModuleNotFoundError:
            print("missing ok")
        """
    )
    assert out.split() == ["missing", "ok"]


def test_refuses_when_the_real_optree_is_already_imported():
    out = run_python(
        """
        import sys, types
        sys.modules["optree"] = types.ModuleType("optree")  # stands for the real package
        import optree_core
        try:
            optree_core.install_as_optree(torch=False)
        except RuntimeError as exc:
            print("refused", "before" in str(exc))
        """
    )
    assert out.split() == ["refused", "True"]


TORCH_TREES = """
import collections, torch
Point = collections.namedtuple("Point", "x y")
values, indices = torch.tensor([[1.0, 5.0], [4.0, 2.0]]).max(dim=0)
TREES = [
    torch.Size([2, 3]),
    torch.tensor([[1.0, 5.0], [4.0, 2.0]]).max(dim=0),  # torch.return_types.max
    collections.OrderedDict(b=torch.ones(1), a=[1, None]),
    collections.defaultdict(list, {"y": (1, 2), "x": torch.Size([4])}),
    collections.deque([1, [2, 3]], maxlen=4),
    {"z": None, "a": Point(torch.zeros(2), {"k": (None, 3)}), "m": [torch.Size([]), ()]},
    None,
    [None, 1.5, "leaf"],
]
"""


def test_torch_cxx_pytree_agrees_with_python_pytree():
    pytest.importorskip("torch")
    out = run_python(
        "import optree_core\noptree_core.install_as_optree()\n"
        + TORCH_TREES
        + textwrap.dedent("""
        import torch.utils._cxx_pytree as cxx
        import torch.utils._pytree as py
        assert cxx.optree is optree_core

        def same(a, b):
            if isinstance(a, torch.Tensor):
                return torch.equal(a, b)
            return type(a) is type(b) and a == b

        for tree in TREES:
            leaves, spec = cxx.tree_flatten(tree)
            py_leaves, py_spec = py.tree_flatten(tree)
            assert len(leaves) == len(py_leaves) == spec.num_leaves, (tree, leaves, py_leaves)
            assert all(same(a, b) for a, b in zip(leaves, py_leaves)), (tree, leaves, py_leaves)
            assert list(cxx.tree_iter(tree)) == leaves or all(
                same(a, b) for a, b in zip(cxx.tree_iter(tree), leaves))
            rebuilt = cxx.tree_unflatten(leaves, spec)
            py_rebuilt = py.tree_unflatten(py_leaves, py_spec)  # torch.Size comes back a tuple
            assert type(rebuilt) is type(py_rebuilt) and repr(rebuilt) == repr(py_rebuilt)
            doubled = cxx.tree_map(lambda x: x * 2 if isinstance(x, (int, float)) else x, tree)
            py_doubled = py.tree_map(lambda x: x * 2 if isinstance(x, (int, float)) else x, tree)
            assert repr(doubled) == repr(py_doubled), (doubled, py_doubled)
            # Paths: optree_core's accessors (in torch's namespace) and torch's key paths lead to
            # the very same leaf objects (namedtuple fields are indices in one, names in the other).
            accessors = optree_core.tree_accessors(tree, none_is_leaf=True, namespace="torch")
            py_paths = [path for path, _ in py.tree_flatten_with_path(tree)[0]]
            assert len(accessors) == len(py_paths) == len(leaves)
            for accessor, path, leaf in zip(accessors, py_paths, leaves):
                assert accessor(tree) is py.key_get(tree, path) is leaf, (tree, accessor, path)
        print("agree", len(TREES))
        """)
    )
    assert out.split() == ["agree", "8"]


def test_torch_registrations_reach_optree_core_and_leafspec_subclasses_the_metaclass():
    pytest.importorskip("torch")
    out = run_python(
        """
        import warnings
        import optree_core
        optree_core.install_as_optree()
        import torch
        import torch.utils._cxx_pytree as cxx
        import torch.utils._pytree as py

        class Pair:
            def __init__(self, a, b):
                self.a, self.b = a, b

        py.register_pytree_node(Pair, lambda p: ([p.a, p.b], None),
                                lambda children, ctx: Pair(*children))
        leaves, spec = cxx.tree_flatten({"p": Pair(1, torch.Size([2]))})
        assert leaves == [1, 2], leaves
        assert cxx.tree_unflatten([3, 4], spec)["p"].b == torch.Size([4])

        # torch's LeafSpec is a subclass of PyTreeSpec with a subclass of its metaclass.
        assert issubclass(cxx.LeafSpec, optree_core.PyTreeSpec)
        assert issubclass(type(cxx.LeafSpec), type(optree_core.PyTreeSpec))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            assert isinstance(cxx.treespec_leaf(), cxx.LeafSpec)
            assert not isinstance(cxx.tree_structure([1]), cxx.LeafSpec)
            assert cxx.LeafSpec() == cxx.treespec_leaf()
        print("ok")
        """
    )
    assert out.split() == ["ok"]


def test_refuses_when_torch_cxx_pytree_already_runs_on_another_optree():
    pytest.importorskip("torch")
    out = run_python(
        """
        import sys, types
        import optree_core
        sys.modules["torch.utils._cxx_pytree"] = types.SimpleNamespace(optree=object())
        try:
            optree_core.install_as_optree()
        except RuntimeError as exc:
            print("refused")
        """
    )
    assert out.split() == ["refused"]
