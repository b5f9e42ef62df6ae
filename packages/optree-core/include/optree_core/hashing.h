// Hash combination for treespec hashing.
#pragma once

#include <Python.h>

#include <cstdint>

namespace optree_core {

// Mixes `value` into `seed` (boost::hash_combine's golden-ratio scheme). The arithmetic is done
// on unsigned integers, where wrap-around is defined.
inline void HashCombine(Py_hash_t& seed, Py_hash_t value) {
  std::uint64_t s = static_cast<std::uint64_t>(seed);
  s ^= static_cast<std::uint64_t>(value) + 0x9e3779b97f4a7c15ULL + (s << 6) + (s >> 2);
  seed = static_cast<Py_hash_t>(s);
}

}  // namespace optree_core
