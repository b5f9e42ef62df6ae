"""The former home of :mod:`optree_core.integrations.torch`, kept so old imports work."""

from optree_core.integrations.torch import *  # noqa: F403
