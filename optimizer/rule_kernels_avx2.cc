// The rules' fp32 loops for avx2 (flags in optimizer/CMakeLists.txt).
#include <cstddef>

#include "optimizer/rule_kernels.h"

#define MLPO_RULE_LOOP RuleLoopAvx2
#include "optimizer/rule_kernels_isa.inc"
