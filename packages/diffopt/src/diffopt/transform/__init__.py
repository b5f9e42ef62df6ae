"""Gradient transformations: the building blocks that :mod:`diffopt.alias` chains into optimizers.

Each is a factory returning a :class:`~diffopt.base.GradientTransformation` and, when it has
state, a ``<Name>State`` NamedTuple.

Example:
    >>> import diffopt
    >>> tx = diffopt.chain(diffopt.transform.scale_by_adam(), diffopt.transform.scale(-1e-3))
    >>> isinstance(tx, diffopt.GradientTransformation), type(tx).__name__
    (True, 'ChainedGradientTransformation')
"""

from diffopt.transform.adadelta import ScaleByAdaDeltaState, scale_by_adadelta
from diffopt.transform.adafactor import (
    ScaleByAdafactorState,
    scale_by_accelerated_adafactor,
    scale_by_adafactor,
)
from diffopt.transform.adam import ScaleByAdamState, scale_by_accelerated_adam, scale_by_adam
from diffopt.transform.adamax import ScaleByAdamaxState, scale_by_adamax
from diffopt.transform.adan import ScaleByAdanState, scale_by_accelerated_adan, scale_by_adan
from diffopt.transform.asgd import ScaleByASGDState, scale_by_accelerated_asgd, scale_by_asgd
from diffopt.transform.lion import ScaleByLionState, scale_by_accelerated_lion, scale_by_lion
from diffopt.transform.masked import MaskedNode, MaskedState, masked
from diffopt.transform.muon import ScaleByMuonState, scale_by_accelerated_muon, scale_by_muon
from diffopt.transform.nadam import ScaleByNAdamState, scale_by_accelerated_nadam, scale_by_nadam
from diffopt.transform.nan_to_num import NanToNumState, nan_to_num
from diffopt.transform.radam import ScaleByRAdamState, scale_by_radam
from diffopt.transform.rms import (
    ScaleByRmsState,
    ScaleByRStdDevState,
    scale_by_rms,
    scale_by_stddev,
)
from diffopt.transform.rprop import ScaleByRpropState, scale_by_accelerated_rprop, scale_by_rprop
from diffopt.transform.rss import ScaleByRssState, scale_by_rss
from diffopt.transform.scale import ScaleByScheduleState, ScaleState, scale, scale_by_schedule
from diffopt.transform.trace import TraceState, trace
from diffopt.transform.weight_decay import AddDecayedWeightsState, add_decayed_weights

__all__ = [
    "AddDecayedWeightsState",
    "MaskedNode",
    "MaskedState",
    "NanToNumState",
    "ScaleByASGDState",
    "ScaleByAdaDeltaState",
    "ScaleByAdafactorState",
    "ScaleByAdamState",
    "ScaleByAdamaxState",
    "ScaleByAdanState",
    "ScaleByLionState",
    "ScaleByMuonState",
    "ScaleByNAdamState",
    "ScaleByRAdamState",
    "ScaleByRStdDevState",
    "ScaleByRmsState",
    "ScaleByRpropState",
    "ScaleByRssState",
    "ScaleByScheduleState",
    "ScaleState",
    "TraceState",
    "add_decayed_weights",
    "masked",
    "nan_to_num",
    "scale",
    "scale_by_accelerated_adam",
    "scale_by_accelerated_adan",
    "scale_by_accelerated_lion",
    "scale_by_accelerated_muon",
    "scale_by_accelerated_adafactor",
    "scale_by_accelerated_asgd",
    "scale_by_accelerated_nadam",
    "scale_by_accelerated_rprop",
    "scale_by_adadelta",
    "scale_by_adafactor",
    "scale_by_adam",
    "scale_by_adamax",
    "scale_by_adan",
    "scale_by_lion",
    "scale_by_muon",
    "scale_by_asgd",
    "scale_by_nadam",
    "scale_by_radam",
    "scale_by_rms",
    "scale_by_rprop",
    "scale_by_rss",
    "scale_by_schedule",
    "scale_by_stddev",
    "trace",
]
