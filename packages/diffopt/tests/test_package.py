"""The package surface: TorchOpt-compatible names, __all__ everywhere, dependency checks."""

import importlib
import pkgutil

import pytest

import diffopt
from diffopt import _dependencies

# Names TorchOpt user code and tutorials reach for through ``import torchopt``.
TORCHOPT_NAMES = [
    "Optimizer", "SGD", "Adam", "AdamW", "RMSProp", "RMSprop", "AdaGrad", "Adagrad", "AdaDelta",
    "Adadelta", "AdaMax", "Adamax", "RAdam", "MetaOptimizer", "MetaSGD", "MetaAdam", "MetaAdamW",
    "MetaRMSProp", "MetaRMSprop", "MetaAdaGrad", "MetaAdagrad", "MetaAdaDelta", "MetaAdadelta",
    "MetaAdaMax", "MetaAdamax", "MetaRAdam", "FuncOptimizer", "sgd", "adam", "adamw", "rmsprop",
    "adagrad", "adadelta", "adamax", "radam", "chain", "apply_updates", "clip_grad_norm",
    "nan_to_num", "register_hook", "scale", "scale_by_adam", "scale_by_rms", "scale_by_stddev",
    "scale_by_schedule", "trace", "add_decayed_weights", "extract_state_dict",
    "recover_state_dict", "module_clone", "module_detach_", "stop_gradient",
    "accelerated_op_available", "linear_schedule", "polynomial_schedule", "exponential_decay",
    "pytree", "schedule", "optim", "nn", "hook", "diff", "transform", "alias", "__version__",
]


@pytest.mark.parametrize("name", TORCHOPT_NAMES)
def test_torchopt_name_exists(name):
    assert hasattr(diffopt, name)
    assert name in diffopt.__all__


def test_nested_torchopt_paths():
    assert diffopt.optim.meta.MetaAdam is diffopt.MetaAdam
    assert diffopt.optim.func.FuncOptimizer is diffopt.FuncOptimizer
    assert diffopt.schedule.linear_schedule is diffopt.linear_schedule
    assert callable(diffopt.hook.zero_nan_hook)
    assert callable(diffopt.pytree.tree_map)
    assert diffopt.nn.MetaGradientModule


def test_every_public_module_has_all():
    for info in pkgutil.walk_packages(diffopt.__path__, prefix="diffopt."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        module = importlib.import_module(info.name)
        assert hasattr(module, "__all__"), info.name
        for name in module.__all__:
            assert hasattr(module, name), f"{info.name}.{name}"


def test_version_is_single_sourced():
    from diffopt.version import __version__

    assert diffopt.__version__ == __version__
    assert __version__.count(".") == 2


def test_too_old_sibling_names_the_package(monkeypatch):
    import optree_core

    monkeypatch.setattr(optree_core, "__version__", "0.0.9")
    with pytest.raises(ImportError, match="optree-core"):
        _dependencies.check_dependencies()


def test_missing_required_sibling(monkeypatch):
    monkeypatch.setattr(_dependencies.importlib.util, "find_spec",
                        lambda name: None if name == "optree_core" else object())
    with pytest.raises(ImportError, match=r"optree-core.*not installed"):
        _dependencies.check_dependencies()


def test_accelerated_op_without_fused_optim_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fused_optim", None)
    assert not diffopt.accelerated_op_available()
    tx = diffopt.adam(use_accelerated_op=True)
    state = tx.init([pytest.importorskip("torch").zeros(1)])
    import torch

    with pytest.raises(ImportError, match="fused-optim"):
        tx.update([torch.ones(1)], state)
