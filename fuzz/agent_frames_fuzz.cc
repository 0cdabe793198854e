// libFuzzer target for the agent protocol's frame decoder: bytes arrive in pieces of
// varying size (the first input byte picks the piece size), and every input must decode
// into messages or stop with ProtocolError; nothing else may happen. A decoded message
// must re-encode without error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/agent/agent_protocol.h"
#include "launcher/process/byte_queue.h"

namespace proto = hvdrun::launcher::proto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  proto::Decoder decoder;
  try {
    while (!bytes.empty()) {
      size_t n = std::min(piece, bytes.size());
      decoder.feed(bytes.substr(0, n));
      bytes.remove_prefix(n);
      while (auto msg = decoder.next()) {
        hvdrun::launcher::ByteQueue out;
        proto::encode(*msg, out);
      }
    }
  } catch (const proto::ProtocolError&) {
  }
  return 0;
}
