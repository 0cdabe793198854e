// libFuzzer target for the agent-rank control channel's decoder (common/control_protocol.h):
// bytes arrive in pieces of varying size (the first input byte picks the piece size), and
// every input must decode into messages or stop with ProtocolError; nothing else may
// happen. A decoded message must re-encode into the same frame.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/control_protocol.h"

namespace control = hvdrun::control;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  control::Decoder decoder;
  try {
    while (!bytes.empty()) {
      size_t n = std::min(piece, bytes.size());
      decoder.feed(bytes.substr(0, n));
      bytes.remove_prefix(n);
      while (auto msg = decoder.next()) {
        control::Decoder again;
        again.feed(control::encode(*msg));
        if (again.next() != msg) std::abort();  // the codec must round-trip
      }
    }
  } catch (const control::ProtocolError&) {
  }
  return 0;
}
