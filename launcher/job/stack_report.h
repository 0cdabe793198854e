// The stack report as the launcher prints it (docs/diagnosis.md#the-stack-report): every
// rank's answer (common/stack_file.h) read into where it is (its innermost frame of the
// program's own code) and what it waits in, ranks with the same stacks and waits grouped,
// each group's stacks printed once. Pure functions: the job gathers, this formats.
#pragma once

#include <string>
#include <vector>

namespace hvdrun::launcher {

/// One rank's answer to a stacks request.
struct RankStackAnswer {
  int rank = 0;
  std::string host;
  enum class Kind {
    whole,       ///< the report ends with the end line
    partial,     ///< no end line within the wait (text: what it wrote by then)
    no_handler,  ///< the rank catches no stack signal (text: what /proc says)
    no_answer,   ///< its agent did not answer within the wait
  } kind = Kind::no_answer;
  std::string text;
};

/// What one report says, read from its text.
struct ReadStacks {
  std::string where;               ///< "train.py:45 in step", or "" when no frame is known
  std::vector<std::string> waits;  ///< "allreduce 'x' float32[4] waiting 61 s", ...
  std::string no_wait_note;        ///< with no waits: " (hvdrun is not initialised)" or """
  std::string stacks;              ///< the stack lines as written (indented by the printer)
  std::string key;                 ///< stacks and waits without addresses and times
};

/// Reads one rank's report.
ReadStacks read_stacks(const std::string& text);

/// "0-2, 5, 7-9" for sorted, distinct ranks.
std::string rank_ranges(const std::vector<int>& ranks);

/// The grouped report: a title line with `why`, then one line per group ("ranks 0-2:
/// train.py:45 in step -> allreduce 'grad' float32[4] waiting 61 s") and its stacks once.
/// `wait_text` is the wait bound as printed ("3 s"), for ranks that did not answer.
std::string format_stack_report(std::vector<RankStackAnswer> answers, const std::string& why,
                                const std::string& wait_text);

}  // namespace hvdrun::launcher
