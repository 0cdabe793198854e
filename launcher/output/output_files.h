// --output-filename DIR: the per-rank files DIR/rank.N/{stdout,stderr}, opened so that
// another local user cannot redirect them (common/safe_path.h): DIR and every directory
// above it belong to this user or root and are writable by nobody else unless sticky (like
// /tmp); DIR is created when missing (0700); rank directories are made 0700 and opened
// without following symbolic links; files are opened with O_NOFOLLOW, 0600, and must be
// regular files of this user.
#pragma once

#include <string>
#include <vector>

#include "common/fd.h"

namespace hvdrun::launcher {

/// Opens DIR/rank.N/stdout and stderr for ranks first..size-1, creating what is missing;
/// element 2*(N-first) is rank N's stdout, 2*(N-first)+1 its stderr. `rank_dir` names rank
/// N's directory, given `name_size` (0: `size`) as the job's size: ranks added to a running
/// job keep the width of the names the job started with. Throws UsageError naming the
/// path, what is wrong with it and what to do.
std::vector<UniqueFd> open_output_files(const std::string& dir, int size,
                                        std::string (*rank_dir)(int rank, int size), int first = 0,
                                        int name_size = 0);

}  // namespace hvdrun::launcher
