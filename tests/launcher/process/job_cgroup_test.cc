// The job cgroup: finding the hierarchy in mountinfo texts of the usual layouts, and, where
// this host's cgroup v2 is writable, a real cgroup that a child joins before exec and that
// is emptied of a setsid'd grandchild by cgroup.kill and by freeze-and-kill alike.
#include "launcher/process/job_cgroup.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "launcher/process/subprocess.h"
#include "tests/skip.h"
#include "tests/support/processes.h"

using namespace hvdrun::launcher;
using namespace hvdrun::testing;
using namespace std::chrono_literals;

TEST_CASE("the cgroup v2 hierarchy is found in mountinfo, hybrid or unified") {
  const std::string hybrid =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  auto m = find_cgroup2_mount(hybrid);
  REQUIRE(m);
  CHECK(m->root == "/");
  CHECK(m->mount_point == "/sys/fs/cgroup/unified");
  // Optional fields before the separator, and an escaped space in the mount point.
  m = find_cgroup2_mount(
      "29 22 0:26 /user.slice /mnt/my\\040cgroups rw,nosuid shared:4 master:1 - cgroup2 "
      "cgroup2 rw,nsdelegate\n");
  REQUIRE(m);
  CHECK(m->root == "/user.slice");
  CHECK(m->mount_point == "/mnt/my cgroups");
  CHECK_FALSE(find_cgroup2_mount("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"));
  CHECK_FALSE(find_cgroup2_mount(""));
}

TEST_CASE("this process's cgroup v2 is the 0:: line, placed under the mount's root") {
  CHECK(own_cgroup2_path("4:memory:/a\n0::/user.slice/user-0.slice/session-3.scope\n") ==
        "/user.slice/user-0.slice/session-3.scope");
  CHECK_FALSE(own_cgroup2_path("4:memory:/a\n1:name=systemd:/\n"));
  const Cgroup2Mount whole{"/", "/sys/fs/cgroup"};
  CHECK(cgroup_dir(whole, "/") == "/sys/fs/cgroup");
  CHECK(cgroup_dir(whole, "/a/b") == "/sys/fs/cgroup/a/b");
  const Cgroup2Mount sub{"/user.slice", "/mnt/cg"};
  CHECK(cgroup_dir(sub, "/user.slice/u") == "/mnt/cg/u");
  CHECK(cgroup_dir(sub, "/user.slice") == "/mnt/cg");
  CHECK_FALSE(cgroup_dir(sub, "/user.slicer/u"));
  CHECK_FALSE(cgroup_dir(sub, "/system.slice"));
}

TEST_CASE("a job cgroup holds what a child starts with setsid and is emptied and removed") {
  const bool kill_file = GENERATE(true, false);
  // Started in the cgroup by clone3, or (where that is refused) joined through cgroup.procs.
  const bool by_clone = GENERATE(true, false);
  std::string why_not;
  auto cg = JobCgroup::create("hvdrun-test-" + std::to_string(::getpid()), why_not);
  if (!cg) HVDRUN_SKIP("cgroup v2 is not writable here: " << why_not);
  const std::string dir = cg->dir();
  INFO("cgroup " << dir << (kill_file ? " (cgroup.kill)" : " (freeze and SIGKILL)")
                 << (by_clone ? ", started in it" : ", joined by cgroup.procs"));
  TempDir tmp("cg");
  // The child leaves its group and session through a grandchild, then exits: the
  // grandchild is nobody's child here, so only the cgroup still knows it is the job's.
  ChildSpec spec;
  // The pid file is written by the shell's own echo, not by a helper such as mv: a helper
  // would be a second process in the cgroup for the moment after the file appears.
  spec.argv = {
      "sh", "-c",
      "setsid sh -c 'echo $$ > " + tmp.path() + "/g; exec sleep 300' </dev/null >/dev/null 2>&1 &"};
  spec.cgroup_procs_fd = cg->procs_fd();
  if (by_clone) spec.cgroup_dir_fd = cg->dir_fd();
  const pid_t child = spawn(spec).pid;
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  const pid_t grandchild = read_pid_file(tmp.path() + "/g");
  const std::string name = dir.substr(dir.rfind('/'));
  CHECK(read_file("/proc/" + std::to_string(grandchild) + "/cgroup").find(name + "\n") !=
        std::string::npos);
  CHECK(cgroup_pids(dir) == std::vector<pid_t>{grandchild});
  const std::string why = cg->remove(std::chrono::steady_clock::now() + 5s, kill_file);
  CHECK(why.empty());
  CHECK(wait_none_alive({grandchild}, 5s));
  struct stat st {};
  CHECK(::stat(dir.c_str(), &st) != 0);
  if (alive(grandchild)) ::kill(grandchild, SIGKILL);
}

TEST_CASE("a cgroup that cannot be made is reported, not thrown") {
  std::string why_not;
  // A name with a slash asks for a directory below a missing one: mkdir fails.
  auto cg = JobCgroup::create("no-such-parent-" + std::to_string(::getpid()) + "/x", why_not);
  CHECK_FALSE(cg);
  CHECK_FALSE(why_not.empty());
}

TEST_CASE("fork_into_cgroup starts the child in the cgroup, or refuses and starts none") {
  std::string why_not;
  auto cg = JobCgroup::create("hvdrun-clone-" + std::to_string(::getpid()), why_not);
  if (!cg) HVDRUN_SKIP("cgroup v2 is not writable here: " << why_not);
  const pid_t pid = fork_into_cgroup(cg->dir_fd());
  if (pid == 0) ::_exit(::pause());  // waits here, in the cgroup, for the SIGKILL below
  if (pid < 0) {
    // A kernel before 5.7, a seccomp filter, or a sanitizer build: nothing was started.
    CHECK((errno == ENOSYS || errno == EINVAL || errno == E2BIG || errno == EPERM));
    CHECK(cgroup_pids(cg->dir()).empty());
    return;
  }
  CHECK(cgroup_pids(cg->dir()) == std::vector<pid_t>{pid});
  ::kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(cg->remove(std::chrono::steady_clock::now() + 5s).empty());
}
