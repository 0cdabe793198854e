// Scale factors applied once, in libhvdrun (semantics.h): prescale before the data moves,
// postscale after, on host buffers, with the arithmetic of runtime/reduce/scale.h.
#include <memory>
#include <string>
#include <vector>

#include "runtime/reduce/scale.h"
#include "runtime/semantics/semantics.h"

namespace hvdrun::semantics {

bool library_scales(const Collective& c) {
  return !c.device && !c.caller_scales &&
         (c.kind == CollectiveKind::kAllreduce || c.kind == CollectiveKind::kReducescatter);
}

void check_scales(const Collective& c, const char* fn) {
  if (!c.device || c.caller_scales || (c.prescale == 1.0 && c.postscale == 1.0)) return;
  throw InvalidArgument(std::string("hvdrun::") + fn + ": prescale " + std::to_string(c.prescale) +
                        " and postscale " + std::to_string(c.postscale) +
                        " on device buffers are not applied by this library; apply them to the "
                        "buffers yourself and set caller_scales");
}

Prescaled prescaled(const Collective& c) {
  Prescaled p{c, nullptr};
  if (!library_scales(c) || c.prescale == 1.0 || c.count == 0) return p;
  if (c.kind == CollectiveKind::kAllreduce) {
    runtime::scale_into(c.recv, c.send, c.count, c.dtype, c.prescale);
    p.c.send = c.recv;
    return p;
  }
  p.scratch = std::make_shared<std::vector<unsigned char>>(c.count * dtype_size(c.dtype));
  runtime::scale_into(p.scratch->data(), c.send, c.count, c.dtype, c.prescale);
  p.c.send = p.scratch->data();
  return p;
}

void postscale(const Collective& c, std::size_t count) {
  if (!library_scales(c) || c.postscale == 1.0 || count == 0) return;
  runtime::scale(c.recv, count, c.dtype, c.postscale);
}

}  // namespace hvdrun::semantics
