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

// The passes, each one kernel over every tensor's items (a block each, ItemsOf):
//   kRowNorms: an item is one row; the block's threads stride along it and add their squares by
//     the block tree (BlockSum / BlockTree), and the row's norm is stored.
//   kColumnPartials: an item is kColumnBlockRows rows by kBlockSize columns of one matrix; each
//     thread adds the squares of its column's rows there, in row order, into a partial of its own.
//   kColumnNorms: an item is kBlockSize of the tensor's columns (its matrices' in turn); each thread
//     adds its column's partials in row order and stores the column's norm.
//   kProducts: an item is a chunk of the estimate's elements; each thread writes its strided share.
enum class MatrixPass : int { kRowNorms, kColumnPartials, kColumnNorms, kProducts };
template <MatrixPass P>
using Pass = std::integral_constant<MatrixPass, P>;

// The rows of a matrix that one kColumnPartials block adds into each column's partial: fixed, so
// a column's norm depends on its matrix's shape alone.
inline constexpr int64_t kColumnBlockRows = 32;

FUSED_OPTIM_ELEMENT int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }
FUSED_OPTIM_ELEMENT int64_t RowBlocks(int64_t rows) { return CeilDiv(rows, kColumnBlockRows); }

// A tensor's items in pass P (blocks), a batch of `batch` matrices of rows x cols.
inline int64_t ItemsOf(MatrixPass pass, int64_t batch, int64_t rows, int64_t cols) {
  switch (pass) {
    case MatrixPass::kRowNorms:
      return batch * rows;  // (a row of no columns has norm 0, which is stored too)
    case MatrixPass::kColumnPartials:
      return batch * RowBlocks(rows) * CeilDiv(cols, kBlockSize);
    case MatrixPass::kColumnNorms:
      return CeilDiv(batch * cols, kBlockSize);
    default:
      return ChunksOf(batch * rows * cols);
  }
}

// A tensor's column partials: one per block of rows of each column of each matrix.
inline int64_t ColumnPartialsOf(int64_t batch, int64_t rows, int64_t cols) { return batch * RowBlocks(rows) * cols; }

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

// Thread `thread` of the `threads` of the block on item `at` in pass P (S: the storage type, T: its
// math type): kRowNorms returns the thread's share of the row's sum of squares, which the block
// adds and stores (StoreNorm); the other passes store what they make and return 0. kColumnPartials
// takes kBlockSize threads, a column each.
template <MatrixPass P, typename S, typename T>
FUSED_OPTIM_ELEMENT double MatrixThread(const MatrixMeta& meta, double* partials, MatrixItem at, int64_t thread,
                                        int64_t threads) {
  const int s = at.slot;
  const int64_t rows = meta.rows[s], cols = meta.cols[s];
  if constexpr (P == MatrixPass::kRowNorms) {
    const S* row = static_cast<const S*>(meta.x[s]) + at.item * cols;
    double sum = 0.0;
    for (int64_t j = thread; j < cols; j += threads) sum += Square<S, T>(row[j]);
    return sum;
  } else if constexpr (P == MatrixPass::kColumnPartials) {
    const int64_t tiles = CeilDiv(cols, kBlockSize), row_blocks = RowBlocks(rows);
    const int64_t tile = at.item % tiles, block_of_rows = at.item / tiles % row_blocks;
    const int64_t matrix = at.item / (tiles * row_blocks);
    const int64_t j = tile * kBlockSize + thread;
    if (j >= cols) return 0.0;
    const S* column = static_cast<const S*>(meta.x[s]) + matrix * rows * cols + j;
    const int64_t begin = block_of_rows * kColumnBlockRows;
    const int64_t end = rows - begin < kColumnBlockRows ? rows : begin + kColumnBlockRows;
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += Square<S, T>(column[i * cols]);
    partials[meta.first_partial[s] + (matrix * row_blocks + block_of_rows) * cols + j] = sum;
    return 0.0;
  } else if constexpr (P == MatrixPass::kColumnNorms) {
    const int64_t q = at.item * kBlockSize + thread;  // the column among the tensor's matrices'
    if (q >= meta.batch[s] * cols) return 0.0;
    const int64_t matrix = q / cols, row_blocks = RowBlocks(rows);
    const double* partial = partials + meta.first_partial[s] + matrix * row_blocks * cols + (q - matrix * cols);
    double sum = 0.0;
    for (int64_t b = 0; b < row_blocks; ++b) sum += partial[b * cols];
    StoreNorm<S, T>(meta.out[s], q, sum);
    return 0.0;
  } else {  // kProducts: each product rounded once to S, as ATen's matmul of (rows x 1) (1 x cols)
    const S* r = static_cast<const S*>(meta.x[s]);
    const S* c = static_cast<const S*>(meta.y[s]);
    S* out = static_cast<S*>(meta.out[s]);
    const int64_t numel = meta.batch[s] * rows * cols;
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
  std::vector<int64_t> first_partial(static_cast<size_t>(num_tensors));
  int64_t partials = 0;
  for (int64_t t = 0; t < num_tensors; ++t) {
    const int64_t* d = dims + 3 * t;
    if (d[0] < 0 || d[1] < 0 || d[2] < 0) throw std::logic_error("fused_optim: a negative matrix size in a CUDA plan");
    first_partial[t] = partials;
    partials += ColumnPartialsOf(d[0], d[1], d[2]);
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
          meta.first_partial[s] = first_partial[t];
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
