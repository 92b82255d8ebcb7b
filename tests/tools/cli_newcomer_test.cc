// What a newcomer to the CLI reaches for (issue 49): `mlpo --version`, a
// one-line `mlpo health` whose exit code a script reads, an error object on
// stdout for every failure under --json, and bash completion generated from
// the CLI's own definitions. And what an operator does to a user's store
// as root (issue 51): the files a command makes stay the owner's.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "store/store_target.h"
#include "tests/tools/cli_test_util.h"

namespace mlpo {
namespace {

TEST(CliNewcomerTest, VersionSaysTheReleasePyprojectDeclares) {
  CliRun r = Mlpo("--version");
  ASSERT_EQ(r.code, 0);
  std::ifstream py(std::string(MLPO_SOURCE_DIR) + "/pyproject.toml");
  std::string line, want;
  while (std::getline(py, line))
    if (line.rfind("version = \"", 0) == 0) {
      want = line.substr(11, line.size() - 12);
      break;
    }
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(r.out, "mlpo " + want + "\n");
}

TEST_F(CliTest, HealthIsOneLineAndItsExitCodeFollowsTheStore) {
  CliRun r = Mlpo("health " + store_dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("OK ", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;  // one line
  EXPECT_NE(r.out.find("step 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 object, 1 tag (newest first)"), std::string::npos)
      << r.out;
  r = Mlpo("health " + store_dir_ + " --json");
  ASSERT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["newest_tag"], "first");
  EXPECT_TRUE(j["held_by_pid"].is_null());
  {  // Beside the job that holds it: still healthy, and says who holds it.
    auto writer = ObjectStore::Open(o_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    r = Mlpo("health " + store_dir_ + " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["held_by_pid"], getpid());
  }
  // A segment file cut short: damaged, exit 1, naming the file, without
  // reading a byte of the data (verify --deep would).
  auto s = ObjectStore::Open(StoreOptionsForTarget(store_dir_).value());
  ASSERT_TRUE(s.ok());
  ExtentRef e = (*s)->GetVersion("w0", 0)->extents[0];
  std::string file = (*s)->path(e.path)->SegmentFile(e.offset);
  s->reset();
  ASSERT_EQ(::truncate(file.c_str(), 4096), 0);
  r = Mlpo("health " + store_dir_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out.rfind("DAMAGED ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(file), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify --deep"), std::string::npos) << r.out;
  r = Mlpo("health " + store_dir_ + " --json");
  EXPECT_EQ(r.code, 1);
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["state"], "bad");
  EXPECT_FALSE(j["problems"].empty());
}

TEST_F(CliTest, EveryFailureUnderJsonIsAnErrorObjectOnStdout) {
  struct Case {
    std::string args;
    int code;
    std::string command, in_error;
  };
  for (const Case& c : std::vector<Case>{
           {"inspect " + dir_.path() + "/nothing --json", 1, "inspect",
            "nothing"},
           {"restore " + store_dir_ + " nosuch --json", 1, "restore",
            "nosuch"},
           {"verify --json", 2, "verify", "store"},  // usage: STORE missing
           {"tags " + store_dir_ + " --jsno --json", 2, "tags", "--jsno"},
           {"frobnicate --json", 2, "frobnicate", "frobnicate"},
       }) {
    CliRun r = Mlpo(c.args);
    EXPECT_EQ(r.code, c.code) << c.args;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << c.args << ": " << r.out;
    EXPECT_FALSE(j["ok"].get<bool>()) << c.args;
    EXPECT_EQ(j["exit_code"], c.code) << c.args;
    EXPECT_EQ(j["command"], c.command) << c.args;
    EXPECT_NE(j["error"].get<std::string>().find(c.in_error),
              std::string::npos) << c.args << ": " << r.out;
  }
  // A failure with its own JSON report keeps it (one object, not two).
  CliRun r = Mlpo("inspect " + dir_.path() + "/nothing --json");
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["status"], "NOT_FOUND") << r.out;
  // Without --json stdout stays empty and the words go to stderr.
  r = Mlpo("inspect " + dir_.path() + "/nothing");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, BashCompletionKnowsEverySubcommandAndItsFlags) {
  CliRun r = Mlpo("completion bash");
  ASSERT_EQ(r.code, 0);
  for (const char* want : {"complete -o filenames -F _mlpo mlpo", "health",
                           "verify) opts=\"", "recover)", "relocate)",
                           "--version"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  const size_t verify = r.out.find("verify) opts=\"");
  const std::string line =
      r.out.substr(verify, r.out.find('\n', verify) - verify);
  for (const char* flag : {"--json", "--tag", "--deep", "--help"})
    EXPECT_NE(line.find(flag), std::string::npos) << flag << ": " << line;
  // And bash completes with it: `mlpo he<TAB>` and `mlpo verify --d<TAB>`.
  std::string script = dir_.path() + "/complete.sh";
  {
    std::ofstream f(script);
    f << r.out
      << "COMP_WORDS=(mlpo he); COMP_CWORD=1; _mlpo; echo \"${COMPREPLY[*]}\"\n"
      << "COMP_WORDS=(mlpo verify --d); COMP_CWORD=2; _mlpo; "
         "echo \"${COMPREPLY[*]}\"\n";
  }
  CliRun b = RunCommand("bash " + script);
  ASSERT_EQ(b.code, 0);
  EXPECT_EQ(b.out, "health\n--deep\n");
  EXPECT_EQ(Mlpo("completion fish").code, 2);
}

// Issue 51 item 5: a profile stopped by SIGTERM (a scheduler's stop) or
// ^C left its probe file (1 GiB by default) behind. It goes with the
// process now.
TEST(CliNewcomerTest, AStoppedProfileLeavesNoProbeFile) {
  TempDir dir;
  for (const char* sig : {"TERM", "INT"}) {
    CliRun r = RunCommand("timeout -s " + std::string(sig) + " 1.5 " +
                          std::string(MLPO_CLI) + " profile " + dir.path() +
                          " --size 256M --seconds 30 2>&1");
    EXPECT_NE(r.code, 0) << sig << ": it was to be stopped: " << r.out;
    for (auto& e : std::filesystem::directory_iterator(dir.path()))
      ADD_FAILURE() << sig << ": left behind: " << e.path();
  }
}

// Issue 51 item 3: `tag`, `drop-tag`, `gc`, `restore` and `recover` run by
// root on another user's store left root-owned index files, and the owner
// then got "Permission denied" on meta/CURRENT. Now every file a command
// run as root makes goes to the owner of the store's first path, and the
// owner's own commands write the store after it.
TEST_F(CliTest, ACommandRunAsRootLeavesTheStoreToItsOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to be root and a user)";
  if (RunCommand("command -v setpriv >/dev/null").code != 0)
    GTEST_SKIP() << "needs setpriv (util-linux) to run as another user";
  namespace fs = std::filesystem;
  const uid_t user = 65534;  // nobody
  // The user must reach the store and the binary: skip where a parent
  // directory is closed to others.
  for (fs::path p = fs::path(dir_.path()).parent_path(); p != p.root_path();
       p = p.parent_path()) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH))
      GTEST_SKIP() << p << " is closed to other users";
  }
  ::chmod(dir_.path().c_str(), 0755);
  auto as_user = [&](const std::string& args) {
    return RunCommand("setpriv --reuid=65534 --regid=65534 --clear-groups "
                      "timeout 60 " + std::string(MLPO_CLI) + " " + args +
                      " 2>&1");
  };
  for (auto& e : fs::recursive_directory_iterator(dir_.path()))
    ASSERT_EQ(::lchown(e.path().c_str(), user, user), 0) << e.path();
  CliRun r = as_user("tags " + store_dir_);
  if (r.code != 0) GTEST_SKIP() << "the user cannot run mlpo here: " << r.out;
  int k = 0;
  for (const std::string& cmd :
       {"tag " + store_dir_ + " by-root", "drop-tag " + store_dir_ + " by-root",
        "tag " + store_dir_ + " again", "restore " + store_dir_ + " first",
        "gc " + store_dir_, "recover " + store_dir_}) {
    CliRun root = Mlpo(cmd, /*with_stderr=*/true);
    ASSERT_EQ(root.code, 0) << cmd << ": " << root.out;
    for (auto& e : fs::recursive_directory_iterator(dir_.path())) {
      struct stat st;
      ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
      EXPECT_EQ(st.st_uid, user) << e.path() << " after `mlpo " << cmd << "`";
    }
    // The owner goes on writing it.
    r = as_user("tag " + store_dir_ + " owner-" + std::to_string(k++));
    EXPECT_EQ(r.code, 0) << "after `mlpo " << cmd << "`: " << r.out;
  }
  EXPECT_EQ(as_user("verify " + store_dir_).code, 0);
  // A file of the index root still holds (left by an older release): the
  // user is told it is a permission, whose file, and what to do; not an
  // internal error.
  const std::string current =
      (o_.meta_dir.empty() ? DefaultMetaDir(o_) : o_.meta_dir) + "/CURRENT";
  ASSERT_EQ(::lchown(current.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(current.c_str(), 0600), 0);
  r = as_user("tag " + store_dir_ + " refused --json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("PERMISSION_DENIED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("another user"), std::string::npos) << r.out;
  // verify (root or the owner) names the file and the chown that gives it
  // back, where it once said OK over a store the job could not open.
  r = Mlpo("verify " + store_dir_, /*with_stderr=*/true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("FOREIGN OWNER " + current), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("chown 65534:65534"), std::string::npos) << r.out;
  // recover as the owner refuses: an unreadable file is not damage, and a
  // rebuild from the backup would have rolled the store back to its tag.
  r = as_user("recover " + store_dir_);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("belongs to another user"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("rebuilt"), std::string::npos) << r.out;
  ASSERT_EQ(::lchown(current.c_str(), user, user), 0);
  EXPECT_EQ(as_user("verify " + store_dir_).code, 0);
  // A segment file root still holds: the owner's writer open says whose
  // it is, not a bare "Permission denied".
  std::string seg;
  for (auto& e : fs::recursive_directory_iterator(dir_.path()))
    if (e.path().filename().string().rfind("seg-", 0) == 0)
      seg = e.path().string();
  ASSERT_FALSE(seg.empty());
  ASSERT_EQ(::lchown(seg.c_str(), 0, 0), 0);
  r = as_user("tag " + store_dir_ + " refused-again");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(seg + " belongs to another user (uid 0"),
            std::string::npos) << r.out;
}

}  // namespace
}  // namespace mlpo
