// Numbers read from JSON that came from a file (a store descriptor, the
// adapter's manifest). nlohmann's own conversion to an integer type casts a
// float unchecked, which is undefined behaviour when it is out of range
// (1e34 into uint64_t), and wraps a negative integer into an unsigned one
// silently. JsonField<T>(obj, key) and JsonNumber<T>(value, what) (for a
// value that is no object's field, such as an array element) take only an
// integer that fits T for an integral T, any number for a floating T, and
// otherwise throw std::invalid_argument naming the field and the value
// found, so a caller that turns exceptions into a Status says what was wrong.
#ifndef MLPO_BASE_JSON_NUMBER_H_
#define MLPO_BASE_JSON_NUMBER_H_

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "nlohmann/json.hpp"

namespace mlpo {

// v as a T, for a value that `what` names in the error; throws
// std::invalid_argument when it is not a T.
template <typename T>
T JsonNumber(const nlohmann::json& v, const std::string& what) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  if constexpr (std::is_floating_point_v<T>) {
    if (v.is_number()) return v.get<T>();
  } else if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    auto s = v.get<int64_t>();
    if (std::in_range<T>(s)) return static_cast<T>(s);
  }
  std::string want =
      std::is_floating_point_v<T>
          ? std::string("a number")
          : "an integer in [" +
                std::to_string(std::numeric_limits<T>::min()) + ", " +
                std::to_string(std::numeric_limits<T>::max()) + "]";
  throw std::invalid_argument(what + " must be " + want + ", not " +
                              v.dump());
}

// obj[key] as a T; throws std::out_of_range (nlohmann's) when the key is
// missing and std::invalid_argument when its value is not a T.
template <typename T>
T JsonField(const nlohmann::json& obj, const char* key) {
  return JsonNumber<T>(obj.at(key), std::string("\"") + key + "\"");
}

}  // namespace mlpo

#endif  // MLPO_BASE_JSON_NUMBER_H_
