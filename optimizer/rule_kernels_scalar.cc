// The rules' fp32 loops for scalar (flags in optimizer/CMakeLists.txt).
#include <cstddef>

#include "optimizer/rule_kernels.h"

#define MLPO_RULE_LOOP RuleLoopScalar
#include "optimizer/rule_kernels_isa.inc"
