// The rules' fp32 loops for avx512 (flags in optimizer/CMakeLists.txt).
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/rules.h"

#define MLPO_RULE_LOOP RuleLoopAvx512
#define MLPO_RULE_WIDEN RuleWidenAvx512
#define MLPO_RULE_CAST RuleCastAvx512
#define MLPO_RULE_ISA KernelIsa::kAvx512
#include "optimizer/kernel/rule_kernels_isa.inc"
