// Under --json, every failure of the mlpo CLI is one JSON object on stdout
// when the command printed none of its own (a usage error, a store that
// does not open, a refused operation): a script that parses stdout always
// gets JSON, and the words on stderr stay as they were.
//   {"ok": false, "command": "verify", "exit_code": 1,
//    "status": "NOT_FOUND", "error": "mlpo verify: ..."}
#ifndef MLPO_TOOLS_JSON_ERRORS_H_
#define MLPO_TOOLS_JSON_ERRORS_H_

#include <memory>
#include <streambuf>
#include <string>

#include "absl/status/status.h"

namespace mlpo {

class JsonErrors {
 public:
  // Watches std::cout and copies std::cerr's text aside (still writing it
  // to stderr) when argv holds --json; does nothing otherwise.
  JsonErrors(int argc, char** argv);
  ~JsonErrors();  // puts the streams back
  JsonErrors(const JsonErrors&) = delete;
  JsonErrors& operator=(const JsonErrors&) = delete;

  // Prints the error object when `rc` is a failure and stdout got nothing;
  // returns rc.
  int Finish(int rc);

 private:
  class Tee;
  bool on_ = false;
  std::string command_;
  std::unique_ptr<Tee> out_, err_;
  std::streambuf* old_out_ = nullptr;
  std::streambuf* old_err_ = nullptr;
};

// The status code of the failure the command reports (Fail calls it), for
// the error object's "status".
void NoteFailureStatus(absl::StatusCode code);

}  // namespace mlpo

#endif  // MLPO_TOOLS_JSON_ERRORS_H_
