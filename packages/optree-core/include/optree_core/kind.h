// Node kinds of a pytree. The numbering matches optree's PyTreeKind so that pickles and
// user code comparing `spec.kind` against integers keep working.
#pragma once

#include <cstdint>

namespace optree_core {

enum class PyTreeKind : std::uint8_t {
  kCustom = 0,          // A type registered by the user with a flatten/unflatten pair.
  kLeaf = 1,            // An opaque leaf.
  kNone = 2,            // None, a node with no children (unless none_is_leaf).
  kTuple = 3,           // A plain tuple.
  kList = 4,            // A plain list.
  kDict = 5,            // A plain dict: children in sorted-key order.
  kNamedTuple = 6,      // A collections.namedtuple (or typing.NamedTuple) instance.
  kOrderedDict = 7,     // collections.OrderedDict: children in insertion order.
  kDefaultDict = 8,     // collections.defaultdict: sorted keys, default_factory kept.
  kDeque = 9,           // collections.deque: maxlen kept.
  kStructSequence = 10, // A PyStructSequence such as time.struct_time.
  kFrozenDict = 11,     // Reserved for optree compatibility (Python's frozendict).
};

constexpr int kNumPyTreeKinds = 12;

const char* KindName(PyTreeKind kind);

}  // namespace optree_core
