// libFuzzer target for the rendezvous wire protocol: request and response payload
// decoding, and opening sealed frames. Every input must decode or throw ProtocolError;
// a decoded request or response must re-encode to something that decodes again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "rendezvous/protocol.h"

namespace rdzv = hvdrun::rendezvous;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto req = rdzv::decode_request(bytes);
    rdzv::decode_request(rdzv::encode(req));
  } catch (const rdzv::ProtocolError&) {
  }
  try {
    auto resp = rdzv::decode_response(bytes);
    rdzv::decode_response(rdzv::encode(resp));
  } catch (const rdzv::ProtocolError&) {
  }
  try {
    rdzv::FrameCodec codec("fuzz session key", true);
    codec.open(bytes);
  } catch (const rdzv::ProtocolError&) {
  }
  return 0;
}
