// The stack report's reading and grouping (launcher/job/stack_report.h): where a rank is (its
// innermost frame of the program's own code, Python or native), what it waits in, and ranks
// with the same stacks in one group whatever their thread ids and wait times.
#include "launcher/job/stack_report.h"

#include <catch2/catch.hpp>
#include <string>

using hvdrun::launcher::format_stack_report;
using hvdrun::launcher::rank_ranges;
using hvdrun::launcher::RankStackAnswer;
using hvdrun::launcher::read_stacks;

namespace {

std::string python_report(const std::string& thread, const std::string& wait) {
  return "Thread 0x00007f00000011" + thread +
         " (most recent call first):\n"
         "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
         "\n"
         "Current thread 0x00007f00000022" +
         thread +
         " (most recent call first):\n"
         "  File \"/opt/py/hvdrun/torch/mpi_ops.py\", line 80 in synchronize\n"
         "  File \"/home/u/train.py\", line 45 in step\n"
         "  File \"/home/u/train.py\", line 60 in <module>\n"
         "\n" +
         wait + "hvdrun-stacks-end\n";
}

}  // namespace

TEST_CASE("stack report: the program's innermost frame and the collective it waits in") {
  const auto r =
      read_stacks(python_report("aa", "hvdrun-wait: allreduce 'grad' float32[4] waiting 61 s\n"));
  CHECK(r.where == "train.py:45 in step");
  REQUIRE(r.waits.size() == 1);
  CHECK(r.waits[0] == "allreduce 'grad' float32[4] waiting 61 s");
  CHECK(r.stacks.find("hvdrun-stacks-end") == std::string::npos);
  CHECK(r.stacks.find("hvdrun-wait") == std::string::npos);

  const auto native = read_stacks(
      "hvdrun-native-frames:\n"
      "/usr/lib/libhvdrun.so(+0x1234)[0x7f0000001234]\n"
      "/lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f0000003c05]\n"
      "/lib/x86_64-linux-gnu/libc.so.6(pause+0x10)[0x7f0000004000]\n"
      "/tmp/c_worker(block_here+0x1a)[0x5600000011aa]\n"
      "hvdrun-wait: none\nhvdrun-stacks-end\n");
  CHECK(native.where == "c_worker(block_here+0x1a)");
  CHECK(native.waits.empty());
  CHECK(read_stacks("hvdrun-wait: none (hvdrun is not initialised)\nhvdrun-stacks-end\n")
            .no_wait_note == " (hvdrun is not initialised)");
}

TEST_CASE("stack report: ranks with the same stacks are one group, the others their own") {
  std::vector<RankStackAnswer> answers;
  answers.push_back(
      {3, "node2", RankStackAnswer::Kind::whole,
       python_report("bb", "hvdrun-wait: allreduce 'grad' float32[4] waiting 9 s\n")});
  answers.push_back(
      {0, "node1", RankStackAnswer::Kind::whole,
       python_report("aa", "hvdrun-wait: allreduce 'grad' float32[4] waiting 8.5 s\n")});
  answers.push_back({1, "node1", RankStackAnswer::Kind::whole,
                     "Current thread 0x00007f0000000001 (most recent call first):\n"
                     "  File \"/home/u/train.py\", line 12 in <module>\n"
                     "hvdrun-wait: none\nhvdrun-stacks-end\n"});
  answers.push_back({2, "node1", RankStackAnswer::Kind::no_answer, ""});
  answers.push_back({4, "node2", RankStackAnswer::Kind::no_handler,
                     "process 'sleep' (pid 7), state S; it has no stack report\n"});
  const std::string out = format_stack_report(answers, "--timeout 8 s", "3 s");
  CHECK(out.rfind("hvdrun: where the ranks are (--timeout 8 s):\n", 0) == 0);
  CHECK(
      out.find("ranks 0, 3: train.py:45 in step -> allreduce 'grad' float32[4] waiting 8.5 s\n") !=
      std::string::npos);
  CHECK(out.find("rank 1: train.py:12 in <module>, no collective\n") != std::string::npos);
  CHECK(out.find("rank 2: no answer within 3 s\n") != std::string::npos);
  CHECK(out.find("rank 4: process 'sleep' (pid 7), state S; it has no stack report\n") !=
        std::string::npos);
  // The group's stacks once, indented.
  CHECK(out.find("    Current thread 0x00007f00000022aa") != std::string::npos);
  CHECK(out.find("0x00007f00000022bb") == std::string::npos);
  CHECK(rank_ranges({0, 1, 2, 5, 7, 8}) == "0-2, 5, 7, 8");
}
