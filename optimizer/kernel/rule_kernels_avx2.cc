// The rules' fp32 loops for avx2 (flags in optimizer/CMakeLists.txt).
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/rules.h"

#define MLPO_RULE_LOOP RuleLoopAvx2
#define MLPO_RULE_WIDEN RuleWidenAvx2
#define MLPO_RULE_CAST RuleCastAvx2
#define MLPO_RULE_ISA KernelIsa::kAvx2
#include "optimizer/kernel/rule_kernels_isa.inc"
