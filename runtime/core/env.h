// The environment contract between the launcher and each rank: what hvdrun sets, parsed
// and validated in one place so a rank started by hand gets one clear message.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/control_protocol.h"

namespace hvdrun::runtime {

/// Everything a rank learns from its environment.
struct Environment {
  int rank = 0;                                    ///< HVDRUN_RANK
  int size = 1;                                    ///< HVDRUN_SIZE
  int local_rank = 0;                              ///< HVDRUN_LOCAL_RANK
  int local_size = 1;                              ///< HVDRUN_LOCAL_SIZE
  int cross_rank = 0;                              ///< HVDRUN_CROSS_RANK
  int cross_size = 1;                              ///< HVDRUN_CROSS_SIZE
  std::string hostname;                            ///< HVDRUN_HOSTNAME
  std::string rendezvous_addr;                     ///< HVDRUN_RENDEZVOUS_ADDR
  std::uint16_t rendezvous_port = 0;               ///< HVDRUN_RENDEZVOUS_PORT
  std::string secret;                              ///< HVDRUN_SECRET (hex)
  std::chrono::milliseconds start_timeout{30000};  ///< HVDRUN_START_TIMEOUT (s, default 30)
  std::chrono::milliseconds op_timeout{600000};    ///< HVDRUN_OP_TIMEOUT (s, default 600)
  std::string nccl_mode = "auto";                  ///< HVDRUN_NCCL: auto | require | off
  int generation = 0;                              ///< HVDRUN_GENERATION (default 0)
  int control_fd = -1;                             ///< HVDRUN_CONTROL_FD (default none)
  std::string host_path = "auto";                  ///< HVDRUN_HOST_PATH: auto | shm | gloo
  std::string checkin = "auto";                    ///< HVDRUN_CHECKIN: auto | rank | host
  /// None of the job's variables was set: a program started without hvdrun, which runs
  /// as a single process (rank 0 of 1 on "localhost"); the World then serves its own
  /// rendezvous, so the rendezvous fields are empty here.
  bool standalone = false;
  /// HVDRUN_JOINING=1: the launcher started this process into a running in-process elastic
  /// job, whose ranks sync it when hvd.elastic.run starts. Until then the process runs as
  /// a job of one (alone()): what it does before (a warm-up step) meets no other rank.
  bool joining = false;
  /// This environment is a joining process's job of one (alone()), not its place in the
  /// job: rank 0 of 1, its own rendezvous, the generation it will join.
  bool alone = false;
  /// How many times this process has called init() before (set by the library, not
  /// the environment): each init checks in afresh under its own key prefix.
  int incarnation = 0;
  /// HOROVOD_STALL_CHECK_TIME_SECONDS (default 60).
  std::chrono::milliseconds stall_check{60000};
  /// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (default 0: never).
  std::chrono::milliseconds stall_shutdown{0};
  /// HOROVOD_STALL_CHECK_DISABLE set (to anything but 0 or false).
  bool stall_disabled = false;
};

/// Reads the environment through `getenv` (a parameter so tests can fake it). With none
/// of the job's variables (HVDRUN_RANK ... HVDRUN_SECRET) set, returns a standalone
/// environment, unless another launcher's variables say this process is one of several
/// (HOROVOD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS, WORLD_SIZE above
/// 1): that is an error naming the launcher. Otherwise throws hvdrun::Error listing every
/// missing or garbled variable and saying to run the program under hvdrun.
Environment read_environment(const std::function<const char*(const char*)>& getenv);

/// A joining process's job of one until it joins (HVDRUN_JOINING): rank 0 of 1 on this host,
/// served by its own rendezvous; the generation, host, timeouts and control channel kept.
Environment alone(Environment env);

/// `env` moved to the generation `placement` describes (in-process elastic recovery): rank,
/// sizes, rendezvous and secret from the placement; host, timeouts and paths kept.
Environment placed(Environment env, const control::Placement& placement);

}  // namespace hvdrun::runtime
