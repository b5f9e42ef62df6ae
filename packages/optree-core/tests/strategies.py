"""Hypothesis strategies for nested pytrees of every built-in node kind (plus one custom node)."""

from __future__ import annotations

import collections
import time

from helpers import Empty, Pair, Point, Triple
from hypothesis import strategies as st

# Leaves: values that compare equal to themselves (no NaN) and are never nodes themselves,
# plus None, which is a node unless none_is_leaf=True.
scalar_leaves = st.one_of(
    st.integers(-1000, 1000),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=3),
    st.booleans(),
    st.just(None),
    st.binary(max_size=2),
)

dict_keys = st.one_of(
    st.text(alphabet="abcxyz", min_size=1, max_size=3),
    st.integers(-5, 50),
)


def _same_kind_keys(children):
    # Keys of one dict share a type so that sorting them is well defined.
    return st.one_of(
        st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=3), children, max_size=4),
        st.dictionaries(st.integers(-5, 50), children, max_size=4),
    )


def _deque(children):
    return st.tuples(st.lists(children, max_size=4), st.one_of(st.none(), st.integers(0, 3))).map(
        lambda t: collections.deque(t[0], maxlen=None if t[1] is None else len(t[0]) + t[1])
    )


def _nodes(children, with_custom: bool):
    kinds = [
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        _same_kind_keys(children),
        _same_kind_keys(children).map(lambda d: dict(reversed(list(d.items())))),
        _same_kind_keys(children).map(lambda d: collections.OrderedDict(reversed(list(d.items())))),
        st.tuples(st.sampled_from([list, int, dict]), _same_kind_keys(children)).map(
            lambda t: collections.defaultdict(t[0], t[1])
        ),
        _deque(children),
        st.builds(Point, children, children),
        st.builds(Triple, children, children, children),
        st.just(Empty()),
        st.lists(children, min_size=9, max_size=9).map(lambda v: time.struct_time(v)),
    ]
    if with_custom:
        kinds.append(st.builds(Pair, children, children, st.sampled_from(["p", "q"])))
    return st.one_of(*kinds)


def pytrees(with_custom: bool = False, max_leaves: int = 30):
    """Nested trees; with_custom adds Pair nodes (registered in REFERENCE_NAMESPACE)."""
    return st.recursive(
        scalar_leaves, lambda children: _nodes(children, with_custom), max_leaves=max_leaves
    )
