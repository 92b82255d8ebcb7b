// Helpers for tests: a fresh temporary directory per test, random bytes.
#ifndef MLPO_TESTS_TEST_UTIL_H_
#define MLPO_TESTS_TEST_UTIL_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace mlpo {

// A directory under $TMPDIR (or the build tree) removed on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("MLPO_TEST_TMPDIR");
    std::string root = base ? base : std::filesystem::temp_directory_path();
    auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." +
                                  info->name()
                            : "mlpo";
    for (char& c : name)
      if (c == '/') c = '_';
    static int counter = 0;
    path_ = root + "/mlpo-test-" + std::to_string(getpid()) + "-" + name +
            "-" + std::to_string(counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& s) const {
    std::string p = path_ + "/" + s;
    std::filesystem::create_directories(p);
    return p;
  }

 private:
  std::string path_;
};

// A shell command's exit status (-1 when a signal ended it) and what it
// wrote on stdout (redirect stderr in `cmd` to see it too).
struct CommandResult {
  int code = -1;
  std::string out;
};
inline CommandResult RunCommand(const std::string& cmd) {
  CommandResult r;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  int st = ::pclose(f);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Kill-loop length: `fallback`, or $MLPO_CRASH_ITERATIONS (the slow runs).
inline int CrashIterations(int fallback) {
  const char* e = std::getenv("MLPO_CRASH_ITERATIONS");
  return e ? std::max(1, std::atoi(e)) : fallback;
}

// Forks a child that runs `child(ready_fd)`; the child writes one byte to
// ready_fd once it is running. Then waits `delay_us` and SIGKILLs it.
// Returns true when the child was killed (rather than exiting first).
inline bool RunAndKill(const std::function<void(int)>& child,
                       useconds_t delay_us) {
  int p[2];
  if (pipe(p) != 0) return false;
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(p[0]);
    child(p[1]);
    _exit(0);
  }
  close(p[1]);
  char c;
  bool ready = read(p[0], &c, 1) == 1;
  close(p[0]);
  if (ready) usleep(delay_us);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return ready && WIFSIGNALED(status);
}

inline void FillRandom(void* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* b = static_cast<unsigned char*>(p);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(b + i, &v, 8);
  }
  for (; i < n; ++i) b[i] = static_cast<unsigned char>(rng());
}

}  // namespace mlpo

#endif  // MLPO_TESTS_TEST_UTIL_H_
