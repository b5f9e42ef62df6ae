// The CPU element loop of every kernel: runs a binding (csrc/kernels/binding.h) over each chunk
// of a KernelTable, once per combination of its flags in the float/double loops.
//
// Not an ordinary header: a csrc/cpu/<algo>.cpp includes it inside its ISA namespace, after
// FUSED_OPTIM_CPU_ISA_TARGET (see isa.h), so the loop defined here is compiled for that ISA and
// each ISA gets its own copy.

template <typename scalar_t, typename T, int NL>
struct ChunkIO {
  const scalar_t* read[NL];  // per column: its chunk, or zeros for an absent column
  scalar_t* write[NL];       // per column: its chunk, or scratch for an absent one
  int64_t i;
  T Load(int col) const { return static_cast<T>(read[col][i]); }
  void Store(int col, T value) const { write[col][i] = static_cast<scalar_t>(value); }
};

template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    using HyperT = typename K::template Hyper<T>;
    using ScalarsT = typename K::template Scalars<T>;
    const HyperT h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      ChunkIO<scalar_t, T, K::kLists> io0{};
      for (int col = 0; col < K::kLists; ++col) {
        scalar_t* dst = table.Dst<scalar_t>(t, col);
        const scalar_t* src = table.Src<scalar_t>(t, col);
        // A functional op's outputs already hold the inputs' values (ForEachChunk copied them).
        io0.read[col] = dst ? dst + begin : src ? src + begin : ZerosChunk<scalar_t>();
        io0.write[col] = dst ? dst + begin : ScratchChunk<scalar_t>();
      }
      HyperT h1 = h0;
      ScalarsT s1 = K::template MakeScalars<T>(table.scalars.data() + t * table.num_scalars);
      std::apply(
          [&](auto... flags) {
            Specialize<scalar_t>(
                [&](auto... c) {
                  HyperT hc = h1;
                  ScalarsT sc = s1;
                  K::Flags(hc, sc) = std::make_tuple(static_cast<bool>(c)...);
                  const HyperT h = hc;  // the options, now compile-time constants
                  const ScalarsT s = sc;
                  const ChunkIO<scalar_t, T, K::kLists> io1 = io0;
                  const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
                  for (int64_t i = 0; i < n; ++i) {
                    ChunkIO<scalar_t, T, K::kLists> io = io1;
                    io.i = i;
                    K::Apply(io, h, s);
                  }
                },
                flags...);
          },
          K::Flags(h1, s1));
    });
  });
}

#define FUSED_OPTIM_DEFINE_CPU_KERNEL(name) \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { RunKernel<bind::name>(table, hyper); }
