// Hash combination for treespec hashing.
#pragma once

#include <Python.h>

#include <cstddef>

namespace optree_core {

inline void HashCombine(Py_hash_t& seed, Py_hash_t value) {
  // boost::hash_combine's mixing constant (golden ratio); cheap and well spread.
  seed ^= value + static_cast<Py_hash_t>(0x9e3779b97f4a7c15ULL) + (seed << 6) + (seed >> 2);
}

}  // namespace optree_core
