"""The committed typed stubs of the extension must be what the build generates."""

from pathlib import Path

import pytest

import optree_core

COMMITTED = Path(__file__).resolve().parents[1] / "src" / "optree_core" / "_C.pyi"


def test_generated_stub_matches_the_committed_one():
    installed = Path(optree_core.__file__).with_name("_C.pyi")
    if not COMMITTED.exists():
        pytest.skip("not running from a source checkout")
    assert installed.exists(), "the build must install _C.pyi (nanobind_add_stub)"
    assert installed.read_text() == COMMITTED.read_text(), (
        "src/optree_core/_C.pyi is stale: copy the _C.pyi the build generated over it"
    )


def test_package_is_marked_typed():
    assert Path(optree_core.__file__).with_name("py.typed").exists()


def test_stub_declares_every_public_extension_function():
    text = COMMITTED.read_text() if COMMITTED.exists() else ""
    for name in ("def flatten(", "def flatten_with_path(", "class PyTreeSpec", "def unflatten("):
        assert name in text
