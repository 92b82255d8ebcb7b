#include "base/removed_on_signal.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

namespace mlpo {

namespace {

constexpr int kSlots = 16;
constexpr size_t kPathBytes = 4096;
// A slot counts once its first byte is set (written last); `g_dir` says how
// to remove it.
char g_path[kSlots][kPathBytes];
volatile sig_atomic_t g_dir[kSlots];
std::mutex g_mu;

void RemoveAllAndDie(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_path[i][0] == '\0') continue;
    if (!g_dir[i]) {
      ::unlink(g_path[i]);
      continue;
    }
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/rm", "rm", "-rf", "--", g_path[i],
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

RemovedOnSignal::RemovedOnSignal(const std::string& path, bool directory) {
  std::lock_guard<std::mutex> l(g_mu);
  static bool installed = [] {
    struct sigaction sa = {};
    sa.sa_handler = RemoveAllAndDie;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
    return true;
  }();
  (void)installed;
  if (path.empty() || path.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i)
    if (g_path[i][0] == '\0') {
      g_dir[i] = directory;
      std::memcpy(g_path[i] + 1, path.c_str() + 1, path.size());
      g_path[i][0] = path[0];
      slot_ = i;
      return;
    }
}

RemovedOnSignal::~RemovedOnSignal() {
  std::lock_guard<std::mutex> l(g_mu);
  if (slot_ >= 0) g_path[slot_][0] = '\0';
}

}  // namespace mlpo
