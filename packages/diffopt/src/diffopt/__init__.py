"""diffopt: differentiable optimization for PyTorch, with a TorchOpt-compatible API.

``import diffopt as torchopt`` keeps TorchOpt user code working: optax-style functional
optimizers (:func:`adam`, :func:`chain`...), PyTorch-style optimizers (:class:`Adam`...),
differentiable meta-optimizers (:class:`MetaAdam`...) whose ``step(loss)`` rebuilds a module's
parameters out of place so that an outer loss back-propagates through every inner step, and the
utilities around them.

Example:
    >>> import torch
    >>> import diffopt
    >>> net = torch.nn.Linear(2, 1)
    >>> inner = diffopt.MetaSGD(net, lr=0.1)
    >>> state = diffopt.extract_state_dict(net)
    >>> x = torch.ones(4, 2)
    >>> inner.step(net(x).pow(2).mean())
    >>> net.weight.grad_fn is not None  # the adapted weight is a function of the original one
    True
    >>> diffopt.recover_state_dict(net, state)
    >>> net.weight.is_leaf
    True
"""

from diffopt._dependencies import check_dependencies as _check_dependencies

_check_dependencies()

# ruff: noqa: E402 (the dependency check must run before the sub-imports)
import importlib as _importlib
import importlib.util as _importlib_util

from diffopt import (
    accelerated_op,
    alias,
    base,
    combine,
    diff,
    distributed,
    hook,
    nn,
    optim,
    pytree,
    schedule,
    transform,
    tree_math,
    typing,
    visual,
    wrappers,
)
from diffopt.accelerated_op import accelerated_op_available
from diffopt.alias import (
    adadelta,
    adafactor,
    adagrad,
    adam,
    adamax,
    adamw,
    adan,
    asgd,
    lion,
    muon,
    nadam,
    radam,
    rmsprop,
    rprop,
    sgd,
)
from diffopt.base import EmptyState, GradientTransformation, identity
from diffopt.clip import clip_grad_norm
from diffopt.combine import MultiTransformState, chain, multi_transform
from diffopt.hook import register_hook
from diffopt.optim import (
    ASGD,
    SGD,
    AdaDelta,
    Adadelta,
    Adafactor,
    AdaGrad,
    Adagrad,
    Adam,
    AdaMax,
    Adamax,
    AdamW,
    Adan,
    FuncOptimizer,
    Lion,
    MetaAdaDelta,
    MetaAdadelta,
    MetaAdafactor,
    MetaAdaGrad,
    MetaAdagrad,
    MetaAdam,
    MetaAdaMax,
    MetaAdamax,
    MetaAdamW,
    MetaAdan,
    MetaASGD,
    MetaLion,
    MetaMuon,
    MetaNAdam,
    MetaOptimizer,
    MetaRAdam,
    MetaRMSProp,
    MetaRMSprop,
    MetaRprop,
    MetaSGD,
    Muon,
    NAdam,
    Optimizer,
    RAdam,
    RMSProp,
    RMSprop,
    Rprop,
)
from diffopt.schedule import (
    InjectHyperparamsState,
    exponential_decay,
    inject_hyperparams,
    linear_schedule,
    polynomial_schedule,
)
from diffopt.transform import (
    add_decayed_weights,
    nan_to_num,
    scale,
    scale_by_accelerated_adam,
    scale_by_adadelta,
    scale_by_adafactor,
    scale_by_adam,
    scale_by_adamax,
    scale_by_asgd,
    scale_by_nadam,
    scale_by_radam,
    scale_by_rms,
    scale_by_rprop,
    scale_by_rss,
    scale_by_schedule,
    scale_by_stddev,
    trace,
)
from diffopt.update import apply_updates
from diffopt.utils import (
    ModuleState,
    extract_state_dict,
    module_clone,
    module_detach_,
    recover_state_dict,
    stop_gradient,
)
from diffopt.version import __version__
from diffopt.wrappers import (
    ApplyIfFiniteState,
    LookaheadParams,
    LookaheadState,
    MultiSteps,
    MultiStepsState,
    apply_if_finite,
    lookahead,
)

__all__ = [
    "ASGD",
    "SGD",
    "AdaDelta",
    "AdaGrad",
    "AdaMax",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Adan",
    "EmptyState",
    "FuncOptimizer",
    "GradientTransformation",
    "InjectHyperparamsState",
    "Lion",
    "MetaASGD",
    "MetaAdaDelta",
    "MetaAdaGrad",
    "MetaAdaMax",
    "MetaAdadelta",
    "MetaAdafactor",
    "MetaAdagrad",
    "MetaAdam",
    "MetaAdamW",
    "MetaAdamax",
    "MetaAdan",
    "MetaLion",
    "MetaMuon",
    "MetaNAdam",
    "MetaOptimizer",
    "MetaRAdam",
    "MetaRMSProp",
    "MetaRMSprop",
    "MetaRprop",
    "MetaSGD",
    "ModuleState",
    "Muon",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSProp",
    "RMSprop",
    "Rprop",
    "__version__",
    "accelerated_op",
    "accelerated_op_available",
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamw",
    "adan",
    "add_decayed_weights",
    "alias",
    "apply_updates",
    "asgd",
    "base",
    "chain",
    "clip_grad_norm",
    "combine",
    "diff",
    "distributed",
    "exponential_decay",
    "extract_state_dict",
    "hook",
    "identity",
    "inject_hyperparams",
    "lion",
    "linear_schedule",
    "module_clone",
    "module_detach_",
    "muon",
    "nadam",
    "nan_to_num",
    "nn",
    "optim",
    "polynomial_schedule",
    "pytree",
    "radam",
    "recover_state_dict",
    "register_hook",
    "rmsprop",
    "rprop",
    "scale",
    "scale_by_accelerated_adam",
    "scale_by_adadelta",
    "scale_by_adafactor",
    "scale_by_adam",
    "scale_by_adamax",
    "scale_by_asgd",
    "scale_by_nadam",
    "scale_by_radam",
    "scale_by_rms",
    "scale_by_rprop",
    "scale_by_rss",
    "scale_by_schedule",
    "scale_by_stddev",
    "schedule",
    "sgd",
    "stop_gradient",
    "trace",
    "transform",
    "tree_math",
    "typing",
    "visual",
]
# Optax's hyper-parameter and wrapper tools (issue 26).
__all__ += [
    "ApplyIfFiniteState",
    "LookaheadParams",
    "LookaheadState",
    "MultiSteps",
    "MultiStepsState",
    "MultiTransformState",
    "apply_if_finite",
    "lookahead",
    "multi_transform",
    "wrappers",
]

# Subpackages built alongside this core (implicit differentiation, linear solvers...): exported
# when present, so the core imports cleanly without them.
for _name in ("linalg", "linear_solve", "fixed_point"):
    if _importlib_util.find_spec(f"diffopt.{_name}") is not None:
        globals()[_name] = _importlib.import_module(f"diffopt.{_name}")
        __all__.append(_name)
for _name in ("implicit", "zero_order"):
    if _importlib_util.find_spec(f"diffopt.diff.{_name}") is not None:
        globals()[_name] = _importlib.import_module(f"diffopt.diff.{_name}")
        __all__.append(_name)
del _name

# torch.compile: optree-core's tree functions get Python twins Dynamo traces (no graph breaks),
# registered once torch._dynamo is loaded (see diffopt._dynamo).
from diffopt import _dynamo

_dynamo.install()
