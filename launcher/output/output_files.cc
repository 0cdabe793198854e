// Safe opening of --output-filename's files, by the rules of common/safe_path.h: every
// directory on the way is checked on the descriptor actually opened, and everything below
// DIR is reached relative to that descriptor without following links, so a link, FIFO or
// file planted by another user is refused, never followed.
#include "launcher/output/output_files.h"

#include "common/error.h"
#include "common/safe_path.h"

namespace hvdrun::launcher {

std::vector<UniqueFd> open_output_files(const std::string& dir, int size,
                                        std::string (*rank_dir)(int rank, int size), int first,
                                        int name_size) {
  std::vector<UniqueFd> files;
  try {
    UniqueFd top = open_trusted_dir(dir, true);
    for (int r = first; r < size; ++r) {
      const std::string name = rank_dir(r, name_size > 0 ? name_size : size);
      const std::string path = dir + "/" + name;
      UniqueFd rd = open_private_dir(top.get(), path, name);
      files.push_back(open_private_file(rd.get(), path + "/stdout", "stdout", true));
      files.push_back(open_private_file(rd.get(), path + "/stderr", "stderr", true));
    }
  } catch (const UnsafePath& e) {
    throw UsageError("--output-filename: " + std::string(e.what()) +
                     "; give --output-filename a directory of your own (hvdrun creates a "
                     "missing one with mode 0700)");
  }
  return files;
}

}  // namespace hvdrun::launcher
