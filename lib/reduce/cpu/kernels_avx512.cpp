// The reduction kernels compiled for avx512 (flags in lib/CMakeLists.txt).
#define HIERCOLL_ISA_NS avx512
#include "reduce/cpu/kernels.inl"
