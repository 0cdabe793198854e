// The HVDRUN_* environment contract between the launcher, which sets these variables in
// every rank (launcher/plan/rank_env.cc), and the runtime, which reads them (runtime/core/env.cc),
// with the limits both sides apply. One spelling and one set of limits, so that the two
// sides cannot drift apart.
#pragma once

namespace hvdrun::env_names {

/// The rank, 0 .. size-1.
inline constexpr const char kRank[] = "HVDRUN_RANK";
/// The number of ranks.
inline constexpr const char kSize[] = "HVDRUN_SIZE";
/// The rank among those of its host.
inline constexpr const char kLocalRank[] = "HVDRUN_LOCAL_RANK";
/// The number of ranks on its host.
inline constexpr const char kLocalSize[] = "HVDRUN_LOCAL_SIZE";
/// The index of its host among the hosts with a rank of the same local rank.
inline constexpr const char kCrossRank[] = "HVDRUN_CROSS_RANK";
/// The number of hosts with a rank of the same local rank.
inline constexpr const char kCrossSize[] = "HVDRUN_CROSS_SIZE";
/// Its host's name as written in -H or the hostfile.
inline constexpr const char kHostname[] = "HVDRUN_HOSTNAME";
/// Where the rank reaches the rendezvous server.
inline constexpr const char kRendezvousAddr[] = "HVDRUN_RENDEZVOUS_ADDR";
/// The rendezvous server's port.
inline constexpr const char kRendezvousPort[] = "HVDRUN_RENDEZVOUS_PORT";
/// The per-job secret (hex), never on a command line.
inline constexpr const char kSecret[] = "HVDRUN_SECRET";
/// --start-timeout in seconds.
inline constexpr const char kStartTimeout[] = "HVDRUN_START_TIMEOUT";
/// --network-interface, when given.
inline constexpr const char kNetworkInterface[] = "HVDRUN_NETWORK_INTERFACE";
/// --gpus-per-rank: each rank's CUDA_VISIBLE_DEVICES is its own GPUs, so its device is the
/// first it sees (device 0), not local_rank % devices.
inline constexpr const char kGpusPerRank[] = "HVDRUN_GPUS_PER_RANK";
/// --bind-to (launcher/plan/placement_env.h): set (and not "none") when the rank's agent bound
/// it to cores no other rank of the host was mapped to, so the rank may spin while it waits
/// even when it may run on fewer CPUs than the host has ranks (runtime/shm).
inline constexpr const char kBindTo[] = "HVDRUN_BIND_TO";
/// Seconds a collective may take before the rank ends itself (runtime only).
inline constexpr const char kOpTimeout[] = "HVDRUN_OP_TIMEOUT";
/// The generation of an elastic job.
inline constexpr const char kGeneration[] = "HVDRUN_GENERATION";
/// The rank's end of the control channel from its agent (in-process elastic recovery;
/// set only by an agent that runs it).
inline constexpr const char kControlFd[] = "HVDRUN_CONTROL_FD";
/// Where the rank writes its traceback if it dies of an uncaught exception (set by its agent,
/// a file in the agent's private directory; docs/diagnosis.md#error-files), under both names:
/// torchelastic's, which torch's @record writes to, and hvdrun's.
inline constexpr const char kErrorFile[] = "HVDRUN_ERROR_FILE";
inline constexpr const char kTorchElasticErrorFile[] = "TORCHELASTIC_ERROR_FILE";
/// 1 in a process the launcher started into a running in-process elastic job (a rank
/// taking the place of a failed one, on a host back from its cooldown or new to the job):
/// the runtime runs it as a job of one until its first shutdown() (docs/elastic.md).
inline constexpr const char kJoining[] = "HVDRUN_JOINING";
/// auto | require | off: the runtime's NCCL path.
inline constexpr const char kNccl[] = "HVDRUN_NCCL";
/// Ranks served by one NCCL unique id under the scalable init (default 128); a smaller
/// value exercises several ids on a few GPUs.
inline constexpr const char kNcclRanksPerId[] = "HVDRUN_NCCL_RANKS_PER_ID";
/// auto | shm | gloo: how the runtime's host-memory collectives travel.
inline constexpr const char kHostPath[] = "HVDRUN_HOST_PATH";
/// How a host's ranks check in with the rendezvous: rank (each on its own connection) or
/// host (through local rank 0, over the host's segment: one connection per host).
inline constexpr const char kCheckin[] = "HVDRUN_CHECKIN";
/// Seconds between SIGTERM and SIGKILL when a job is torn down (launcher side).
inline constexpr const char kKillGrace[] = "HVDRUN_KILL_GRACE";
/// Seconds of silence after which a remote agent counts as lost (launcher side).
inline constexpr const char kHeartbeatTimeout[] = "HVDRUN_HEARTBEAT_TIMEOUT";

/// The most ranks one job may have (-np, the slots of a host list, HVDRUN_SIZE).
inline constexpr int kMaxRanks = 1 << 20;
/// The longest --start-timeout / HVDRUN_START_TIMEOUT, in seconds.
inline constexpr int kMaxStartTimeoutS = 24 * 3600;
/// The longest HVDRUN_OP_TIMEOUT, in seconds.
inline constexpr int kMaxOpTimeoutS = 7 * 24 * 3600;
/// The highest HVDRUN_GENERATION.
inline constexpr int kMaxGeneration = 1 << 30;

}  // namespace hvdrun::env_names
