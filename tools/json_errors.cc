#include "tools/json_errors.h"

#include <cstring>
#include <iostream>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "nlohmann/json.hpp"

namespace mlpo {

namespace {
absl::StatusCode g_failure = absl::StatusCode::kOk;
}  // namespace

void NoteFailureStatus(absl::StatusCode code) { g_failure = code; }

// Passes every character on to `next` and counts them; keeps a copy when
// `keep`.
class JsonErrors::Tee : public std::streambuf {
 public:
  Tee(std::streambuf* next, bool keep) : next_(next), keep_(keep) {}
  size_t count() const { return count_; }
  const std::string& text() const { return text_; }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return 0;
    ++count_;
    if (keep_) text_.push_back(traits_type::to_char_type(c));
    return next_->sputc(traits_type::to_char_type(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    count_ += static_cast<size_t>(n);
    if (keep_) text_.append(s, static_cast<size_t>(n));
    return next_->sputn(s, n);
  }
  int sync() override { return next_->pubsync(); }

 private:
  std::streambuf* next_;
  bool keep_;
  size_t count_ = 0;
  std::string text_;
};

JsonErrors::JsonErrors(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) on_ = true;
    if (command_.empty() && argv[i][0] != '-') command_ = argv[i];
  }
  if (!on_) return;
  out_ = std::make_unique<Tee>(std::cout.rdbuf(), /*keep=*/false);
  err_ = std::make_unique<Tee>(std::cerr.rdbuf(), /*keep=*/true);
  old_out_ = std::cout.rdbuf(out_.get());
  old_err_ = std::cerr.rdbuf(err_.get());
}

JsonErrors::~JsonErrors() {
  if (!on_) return;
  std::cout.flush();
  std::cout.rdbuf(old_out_);
  std::cerr.rdbuf(old_err_);
}

int JsonErrors::Finish(int rc) {
  if (!on_ || rc == 0 || out_->count() != 0) return rc;
  // The error is the first line that is not a note or a progress line
  // (CLI11's usage errors end with "Run with --help ..."), else the last.
  std::string error;
  std::vector<std::string> lines = absl::StrSplit(
      err_->text(), absl::ByAnyChar("\r\n"), absl::SkipWhitespace());
  for (const std::string& l : lines) {
    if (absl::StrContains(l, ": note: ") ||
        absl::StartsWith(l, "Run with --help")) continue;
    error = l;
    break;
  }
  if (error.empty() && !lines.empty()) error = lines.back();
  nlohmann::json j = {{"ok", false},
                      {"command", command_.empty() ? nullptr
                                                   : nlohmann::json(command_)},
                      {"exit_code", rc},
                      {"status", g_failure == absl::StatusCode::kOk
                                     ? nullptr
                                     : nlohmann::json(absl::StatusCodeToString(
                                           g_failure))},
                      {"error", error}};
  std::cout << j.dump() << "\n";
  std::cout.flush();
  return rc;
}

}  // namespace mlpo
