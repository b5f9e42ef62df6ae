// Adafactor's per-matrix passes on CUDA as plain C++ that nvcc and the host compiler both build (as
// launch_plan.h is): the L2 norms of every row and every column of a list of batches of matrices
// (its factored second-moment statistics), and the products r c of its row and column averages
// (the estimate). Which matrices and blocks go into each launch, the kernel argument and what each
// thread does are here, so that csrc/cuda/launch_emulation.cpp runs them block by block on the host
// and CPU tests reach every index; csrc/cuda/kernels.cu only launches them. No atomics: every sum
// is added in an order that the shapes alone set, so every run gives the same norms.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "cuda/launch_plan.h"

namespace fused_optim::cuda {

// The passes, each one kernel over every tensor's items (a block each, ItemsOf), sized so that a
// block's threads all have work whatever the shape (a batch of 3 x 3 matrices, a conv weight's, as
// well as a 4096 x 4096 one):
//   kRowNorms: an item is kBlockSize / RowGroup(cols) rows, a group of threads each; a group's
//     threads stride along its row and add their squares by the group's tree (GroupSum /
//     GroupTree), and the row's norm is stored.
//   kColumnPartials: an item is kBlockSize of the tensor's partials (ColumnPartialsOf: a column of
//     its matrices' columns in turn, by a block of kColumnBlockRows rows); each thread adds the
//     squares of its partial's rows of its column, in row order.
//   kColumnNorms: an item is kBlockSize of the tensor's columns; each thread adds its column's
//     partials in row order and stores the column's norm.
//   kProducts: an item is a chunk of the estimate's elements; each thread writes its strided share.
enum class MatrixPass : int { kRowNorms, kColumnPartials, kColumnNorms, kProducts };
template <MatrixPass P>
using Pass = std::integral_constant<MatrixPass, P>;

// The rows of a matrix that one kColumnPartials block adds into each column's partial: fixed, so
// a column's norm depends on its matrix's shape alone.
inline constexpr int64_t kColumnBlockRows = 32;

FUSED_OPTIM_ELEMENT int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }
FUSED_OPTIM_ELEMENT int64_t RowBlocks(int64_t rows) { return CeilDiv(rows, kColumnBlockRows); }

// The threads that add one row of `cols` elements in kRowNorms: the least power of two that
// covers the row, at most kBlockSize (a longer row's threads stride along it).
FUSED_OPTIM_ELEMENT int RowGroup(int64_t cols) {
  int group = 1;
  while (group < cols && group < kBlockSize) group *= 2;
  return group;
}

// A tensor's items in pass P (blocks), a batch of `batch` matrices of rows x cols.
inline int64_t ItemsOf(MatrixPass pass, int64_t batch, int64_t rows, int64_t cols) {
  switch (pass) {
    case MatrixPass::kRowNorms:  // (a row of no columns has norm 0, which is stored too)
      return CeilDiv(batch * rows, kBlockSize / RowGroup(cols));
    case MatrixPass::kColumnPartials:
      return CeilDiv(RowBlocks(rows) * batch * cols, kBlockSize);
    case MatrixPass::kColumnNorms:
      return CeilDiv(batch * cols, kBlockSize);
    default:
      return ChunksOf(batch * rows * cols);
  }
}

// A tensor's column partials: one per block of rows of each column of each matrix, laid out by
// block of rows, then column (the matrices' columns in turn).
inline int64_t ColumnPartialsOf(int64_t batch, int64_t rows, int64_t cols) { return RowBlocks(rows) * batch * cols; }

// The scratch of the columns passes, in doubles: every tensor's partials (dims: batch, rows,
// columns per tensor).
inline int64_t ColumnPartials(int64_t num_tensors, const int64_t* dims) {
  int64_t partials = 0;
  for (int64_t t = 0; t < num_tensors; ++t) partials += ColumnPartialsOf(dims[3 * t], dims[3 * t + 1], dims[3 * t + 2]);
  return partials;
}

// The kernel's argument, by value: up to kSlots slots, each a run of one tensor's items.
struct MatrixMeta {
  static constexpr int kSlots = 256;
  const void* x[kSlots];  // the norms' matrices; kProducts: the row averages (batch x rows)
  const void* y[kSlots];  // kProducts: the column averages (batch x cols)
  void* out[kSlots];      // the tensor's results: its row or column norms, or its estimate
  int64_t batch[kSlots], rows[kSlots], cols[kSlots];
  int64_t first_item[kSlots];       // the tensor's item that the slot's first block works on
  int64_t first_partial[kSlots];    // the columns passes: the tensor's first partial
  int64_t first_block[kSlots + 1];  // as LaunchMetaN's (SlotOf)
  int num_slots;
};
static_assert(sizeof(MatrixMeta) <= kMaxKernelParamBytes, "a matrix pass's argument exceeds the CUDA parameter limit");

// Block `block`'s slot and the item of the slot's tensor it works on.
struct MatrixItem {
  int slot;
  int64_t item;
};
FUSED_OPTIM_ELEMENT MatrixItem ItemOf(const MatrixMeta& meta, int64_t block) {
  const int s = SlotOf(meta, block);
  return {s, meta.first_item[s] + (block - meta.first_block[s])};
}

// A norm from its sum of squares, stored in S through its math type T (a norm of that dtype, as
// RoundTo rounds it).
template <typename S, typename T>
FUSED_OPTIM_ELEMENT void StoreNorm(void* out, int64_t i, double sum) {
  static_cast<S*>(out)[i] = static_cast<S>(static_cast<T>(sqrt(sum)));
}

template <typename S, typename T>
FUSED_OPTIM_ELEMENT double Square(S x) {
  const double v = static_cast<double>(static_cast<T>(x));
  return v * v;
}

// The row (among the tensor's matrices' rows) whose norm the kRowNorms group led by `thread` of
// item `at` stores, or -1 (not a group's first thread, or past the tensor's last row).
FUSED_OPTIM_ELEMENT int64_t GroupRow(const MatrixMeta& meta, MatrixItem at, int64_t thread) {
  const int group = RowGroup(meta.cols[at.slot]);
  const int64_t row = at.item * (kBlockSize / group) + thread / group;
  return thread % group == 0 && row < meta.batch[at.slot] * meta.rows[at.slot] ? row : -1;
}

// Thread `thread` of the block on item `at` in pass P (S: the storage type, T: its math type; the
// block has kBlockSize threads, `threads` of them striding a chunk in kProducts): kRowNorms
// returns the thread's share of its row's sum of squares, which its group adds and its first
// thread stores (GroupRow, StoreNorm); the other passes store what they make and return 0.
template <MatrixPass P, typename S, typename T>
FUSED_OPTIM_ELEMENT double MatrixThread(const MatrixMeta& meta, double* partials, MatrixItem at, int64_t thread,
                                        int64_t threads) {
  const int s = at.slot;
  const int64_t rows = meta.rows[s], cols = meta.cols[s];
  const int64_t columns = meta.batch[s] * cols;  // the columns of the tensor's matrices, in turn
  if constexpr (P == MatrixPass::kRowNorms) {
    const int group = RowGroup(cols);
    const int64_t q = at.item * (kBlockSize / group) + thread / group;  // the group's row
    double sum = 0.0;
    if (q >= meta.batch[s] * rows) return sum;
    const S* row = static_cast<const S*>(meta.x[s]) + q * cols;
    for (int64_t j = thread % group; j < cols; j += group) sum += Square<S, T>(row[j]);
    return sum;
  } else if constexpr (P == MatrixPass::kColumnPartials) {
    const int64_t p = at.item * kBlockSize + thread;  // the partial
    if (p >= RowBlocks(rows) * columns) return 0.0;
    const int64_t block_of_rows = p / columns, q = p - block_of_rows * columns;  // of the column q
    const int64_t matrix = q / cols;
    const S* column = static_cast<const S*>(meta.x[s]) + matrix * rows * cols + (q - matrix * cols);
    const int64_t begin = block_of_rows * kColumnBlockRows;
    const int64_t end = rows - begin < kColumnBlockRows ? rows : begin + kColumnBlockRows;
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += Square<S, T>(column[i * cols]);
    partials[meta.first_partial[s] + p] = sum;
    return 0.0;
  } else if constexpr (P == MatrixPass::kColumnNorms) {
    const int64_t q = at.item * kBlockSize + thread;
    if (q >= columns) return 0.0;
    const double* partial = partials + meta.first_partial[s] + q;
    double sum = 0.0;
    for (int64_t b = 0; b < RowBlocks(rows); ++b) sum += partial[b * columns];
    StoreNorm<S, T>(meta.out[s], q, sum);
    return 0.0;
  } else {  // kProducts: each product rounded once to S, as ATen's matmul of (rows x 1) (1 x cols)
    const S* r = static_cast<const S*>(meta.x[s]);
    const S* c = static_cast<const S*>(meta.y[s]);
    S* out = static_cast<S*>(meta.out[s]);
    const int64_t numel = columns * rows;
    const int64_t begin = at.item * kChunkSize;
    const int64_t end = numel - begin < kChunkSize ? numel : begin + kChunkSize;
    int64_t k = begin + thread;
    if (k >= end) return 0.0;
    // Element k's row q among the tensor's matrices' rows, its column j, its matrix m and its row i
    // there: divided out once, then stepped by `threads` elements (a 64-bit division per element
    // would cost more than the element's store).
    int64_t q = k / cols, j = k - q * cols;
    int64_t m = q / rows, i = q - m * rows;
    const int64_t rows_per_step = threads / cols, cols_per_step = threads - rows_per_step * cols;
    for (; k < end; k += threads) {
      out[k] = static_cast<S>(static_cast<T>(r[q]) * static_cast<T>(c[m * cols + j]));
      int64_t next_rows = rows_per_step;
      j += cols_per_step;
      if (j >= cols) {
        j -= cols;
        ++next_rows;
      }
      q += next_rows;
      i += next_rows;
      if (i >= rows) {
        m += i / rows;
        i %= rows;
      }
    }
    return 0.0;
  }
}

// Plans pass `pass` over `num_tensors` tensors (dims: batch, rows, columns per tensor; x, y and out:
// per tensor, as MatrixMeta's, null where the pass has none), calling
// launch(Pass<P>{}, const MatrixMeta&, int64_t blocks) for each launch in order. `max_blocks`: as
// PlanBlocks's.
template <MatrixPass P, typename Launch>
void ForEachMatrixLaunch(int64_t num_tensors, const int64_t* dims, const void* const* x, const void* const* y,
                         void* const* out, Launch&& launch, int64_t max_blocks) {
  // The columns passes' partials: each tensor's first, its matrices' in turn.
  constexpr bool kPartials = P == MatrixPass::kColumnPartials || P == MatrixPass::kColumnNorms;
  std::vector<int64_t> first_partial(kPartials ? static_cast<size_t>(num_tensors) : 0);
  int64_t partials = 0;
  for (int64_t t = 0; t < num_tensors; ++t) {
    const int64_t* d = dims + 3 * t;
    if (d[0] < 0 || d[1] < 0 || d[2] < 0) throw std::logic_error("fused_optim: a negative matrix size in a CUDA plan");
    if constexpr (kPartials) {
      first_partial[t] = partials;
      partials += ColumnPartialsOf(d[0], d[1], d[2]);
    }
  }
  const auto items = [&](int64_t t) { return ItemsOf(P, dims[3 * t], dims[3 * t + 1], dims[3 * t + 2]); };
  MatrixMeta meta{};
  PlanBlocks(
      num_tensors, items, MatrixMeta::kSlots,
      [&](const PlannedLaunch& planned) {
        FillSlotBlocks(planned, meta);
        for (int s = 0; s < planned.num_slots; ++s) {
          const int64_t t = planned.slots[s].tensor;
          meta.x[s] = x != nullptr ? x[t] : nullptr;
          meta.y[s] = y != nullptr ? y[t] : nullptr;
          meta.out[s] = out != nullptr ? out[t] : nullptr;
          meta.batch[s] = dims[3 * t];
          meta.rows[s] = dims[3 * t + 1];
          meta.cols[s] = dims[3 * t + 2];
          meta.first_item[s] = planned.slots[s].first_chunk;
          meta.first_partial[s] = kPartials ? first_partial[t] : 0;
        }
        launch(Pass<P>{}, static_cast<const MatrixMeta&>(meta), planned.blocks);
      },
      max_blocks);
}

// The norms' three passes in order (NormsAlongRowsAndColumns in csrc/kernels.h).
template <typename Launch>
void ForEachNormsLaunch(int64_t num_tensors, const int64_t* dims, const void* const* data, void* const* row_norms,
                        void* const* col_norms, Launch&& launch, int64_t max_blocks = kMaxGridBlocks) {
  ForEachMatrixLaunch<MatrixPass::kRowNorms>(num_tensors, dims, data, nullptr, row_norms, launch, max_blocks);
  ForEachMatrixLaunch<MatrixPass::kColumnPartials>(num_tensors, dims, data, nullptr, nullptr, launch, max_blocks);
  ForEachMatrixLaunch<MatrixPass::kColumnNorms>(num_tensors, dims, nullptr, nullptr, col_norms, launch, max_blocks);
}

// The estimate's pass (ProductsOfRowsAndColumns in csrc/kernels.h).
template <typename Launch>
void ForEachProductsLaunch(int64_t num_tensors, const int64_t* dims, const void* const* rows, const void* const* cols,
                           void* const* out, Launch&& launch, int64_t max_blocks = kMaxGridBlocks) {
  ForEachMatrixLaunch<MatrixPass::kProducts>(num_tensors, dims, rows, cols, out, launch, max_blocks);
}

}  // namespace fused_optim::cuda
