// `hvdrun --check-build`: what this build of hvdrun can do, in the layout horovodrun's
// --check-build uses ([X] available, [ ] not), so that users moving over recognise it.
#pragma once

#include <string>

namespace hvdrun::compat {

/// The report printed by `hvdrun --check-build`: controllers, tensor operations (NCCL
/// with the version built against and the one found at run time, Gloo, MPI: never),
/// the CUDA runtime, and the compatibility layers (Horovod gloo-mode HTTP rendezvous,
/// torch.distributed env://). Loads libnccl/libcudart with dlopen to report what is
/// installed; never fails, and never needs a GPU.
std::string check_build_report();

}  // namespace hvdrun::compat
