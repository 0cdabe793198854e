// The sentence that marks a rank's failure as the consequence of another rank's: libhvdrun
// ends the error of a collective that a lost peer broke with it, and the launcher looks for
// it in a failed rank's last stderr lines, so that its failure message names the rank that
// failed first rather than one that failed because of it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun {

/// Ends libhvdrun's message for a collective broken by a peer that exited or was cut off.
inline constexpr std::string_view kPeerLossSentence =
    "A peer rank probably exited or lost its connection";

/// True when one of `lines` (a rank's last stderr lines) carries kPeerLossSentence.
inline bool mentions_peer_loss(const std::vector<std::string>& lines) {
  for (const auto& line : lines) {
    if (line.find(kPeerLossSentence) != std::string::npos) return true;
  }
  return false;
}

}  // namespace hvdrun
