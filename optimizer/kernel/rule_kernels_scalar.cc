// The rules' fp32 loops for scalar (flags in optimizer/CMakeLists.txt).
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/rules.h"

#define MLPO_RULE_LOOP RuleLoopScalar
#define MLPO_RULE_WIDEN RuleWidenScalar
#define MLPO_RULE_CAST RuleCastScalar
#define MLPO_RULE_ISA KernelIsa::kScalar
#include "optimizer/kernel/rule_kernels_isa.inc"
