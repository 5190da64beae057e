// The reduction kernels compiled for scalar (flags in lib/CMakeLists.txt).
#define HIERCOLL_ISA_NS scalar
#include "reduce/cpu/kernels.inl"
