"""Learning-rate schedules: functions of the step count, usable wherever an ``lr`` is taken.

Example:
    >>> import diffopt
    >>> tx = diffopt.sgd(lr=diffopt.schedule.linear_schedule(0.1, 0.0, transition_steps=10))
    >>> isinstance(tx, diffopt.GradientTransformation), type(tx).__name__
    (True, 'ChainedGradientTransformation')
"""

from diffopt.schedule.cosine import (
    cosine_decay_schedule,
    cosine_onecycle_schedule,
    sgdr_schedule,
    warmup_cosine_decay_schedule,
)
from diffopt.schedule.exponential_decay import exponential_decay, warmup_exponential_decay_schedule
from diffopt.schedule.inject import InjectHyperparamsState, inject_hyperparams
from diffopt.schedule.piecewise import (
    constant_schedule,
    join_schedules,
    linear_onecycle_schedule,
    piecewise_constant_schedule,
    piecewise_interpolate_schedule,
)
from diffopt.schedule.polynomial import (
    linear_schedule,
    polynomial_schedule,
    warmup_constant_schedule,
)

__all__ = [
    "InjectHyperparamsState",
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "inject_hyperparams",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]
