// Factories of the two IoEngine implementations (internal to store/).
#ifndef MLPO_STORE_IO_IO_ENGINE_IMPL_H_
#define MLPO_STORE_IO_IO_ENGINE_IMPL_H_

#include <memory>

#include "store/io/io_engine.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<IoEngine>> CreateUringEngine(
    const IoEngineOptions& options);
absl::StatusOr<std::unique_ptr<IoEngine>> CreateThreadPoolEngine(
    const IoEngineOptions& options);

}  // namespace mlpo

#endif  // MLPO_STORE_IO_IO_ENGINE_IMPL_H_
