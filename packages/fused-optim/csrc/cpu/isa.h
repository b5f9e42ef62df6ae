// Which instruction set a CPU loop file is compiled for. Each csrc/cpu/<algo>.cpp is built three
// times: for the baseline x86-64 ISA (namespace cpu), with -DFUSED_OPTIM_CPU_AVX2 (cpu_avx2) and
// with -DFUSED_OPTIM_CPU_AVX512 (cpu_avx512); the widest the machine supports is chosen at run
// time. A loop file opens its namespace with
//
//   FUSED_OPTIM_CPU_ISA_TARGET
//   namespace fused_optim::FUSED_OPTIM_CPU_NS {
//
// after all its includes, so only the loops it defines get the wider code: header functions keep
// the baseline ISA (and may still be inlined into the wide loops), and no shared inline function
// is ever compiled for AVX2/AVX-512, which the linker could otherwise pick for the baseline path.
#pragma once

#if defined(FUSED_OPTIM_CPU_AVX512)
#define FUSED_OPTIM_CPU_ISA_TARGET _Pragma("GCC target(\"avx512f,prefer-vector-width=512\")")
#define FUSED_OPTIM_CPU_NS cpu_avx512
#elif defined(FUSED_OPTIM_CPU_AVX2)
#define FUSED_OPTIM_CPU_ISA_TARGET _Pragma("GCC target(\"avx2\")")
#define FUSED_OPTIM_CPU_NS cpu_avx2
#else
#define FUSED_OPTIM_CPU_ISA_TARGET
#define FUSED_OPTIM_CPU_NS cpu
#endif
