// The reduction kernels compiled for avx2 (flags in lib/CMakeLists.txt).
#define HIERCOLL_ISA_NS avx2
#include "reduce/cpu/kernels.inl"
