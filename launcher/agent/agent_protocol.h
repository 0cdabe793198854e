// The byte protocol between the launcher and one `hvdrun agent` (one per host). The same
// stream runs over a pipe pair for a local host and over one SSH exec channel for a remote
// host, so nothing here knows about transports.
//
// Wire format. Every frame is
//     u32 length (big-endian; counts the type byte and the payload) | u8 type | payload
// with length <= kMaxFrameBytes. Payload fields are big-endian integers, strings as
// u32 length + bytes, lists as u32 count + items. The first frame in each direction is a
// hello carrying kMagic and kVersion; a peer speaking another version answers with a
// fatal frame and closes. Unknown types, truncated or trailing payload bytes, oversized
// frames and counts larger than the frame are all ProtocolErrors.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "launcher/process/byte_queue.h"

namespace hvdrun::launcher::proto {

/// "HVDA": first field of every hello, so a stray banner is recognised at once.
inline constexpr std::uint32_t kMagic = 0x48564441;
/// Protocol version spoken by this build. 2: the hello carries the launcher's address as
/// the host reaches it, and the agent's hello (sent after it) the interface toward it.
/// 3: suspend and resume (job control), rank-stopped. 4: the hello carries a job id (the
/// name of each host's job cgroup) and --network-interface, the agent's hello that
/// interface's addresses on its host (the Horovod rendezvous admits exactly those).
/// 5: a spawn names which of the agent's own variables its rank starts from, and defaults
/// (launcher/plan/rank_env.h). 6: rank-elastic, regenerate and rank-left (in-process elastic
/// recovery, docs/elastic.md). 7: signal (SIGUSR1 and SIGUSR2 forwarded to the ranks).
/// 8: rank-exited carries the traceback of the rank's error file (TORCHELASTIC_ERROR_FILE).
/// 9: job-end (join mode: every node exits with the job's code).
/// 10: stacks-request and stacks (the stack report, docs/diagnosis.md#the-stack-report).
/// 11: the hello may ask for the host's topology, and the agent's hello carries it
/// (launcher/topology/topology_wire.h), so the launcher plans every host from its own.
inline constexpr std::uint32_t kVersion = 11;
/// Largest frame accepted (type byte + payload).
inline constexpr std::uint32_t kMaxFrameBytes = 16u << 20;
/// Largest output chunk an agent puts in one frame.
inline constexpr std::uint32_t kMaxOutputChunk = 256u << 10;

/// A frame or message that cannot be right: oversized, truncated, unknown type, bad field.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Frame type codes (stable on the wire).
enum class Type : std::uint8_t {
  hello = 1,            ///< launcher -> agent
  agent_hello = 2,      ///< agent -> launcher
  spawn = 3,            ///< launcher -> agent
  rank_started = 4,     ///< agent -> launcher
  output = 5,           ///< agent -> launcher
  rank_exited = 6,      ///< agent -> launcher
  kill = 7,             ///< launcher -> agent
  heartbeat = 8,        ///< both ways
  fatal = 9,            ///< both ways
  suspend = 10,         ///< launcher -> agent
  resume = 11,          ///< launcher -> agent
  rank_stopped = 12,    ///< agent -> launcher
  rank_elastic = 13,    ///< agent -> launcher
  regenerate = 14,      ///< launcher -> agent
  rank_left = 15,       ///< agent -> launcher
  signal = 16,          ///< launcher -> agent
  job_end = 17,         ///< launcher -> agent
  stacks_request = 18,  ///< launcher -> agent
  stacks = 19,          ///< agent -> launcher
};

/// Which output stream of a rank.
enum class Stream : std::uint8_t { out = 1, err = 2 };

/// Launcher's opening frame: version and the agent's timing rules.
struct Hello {
  std::uint32_t version = kVersion;
  /// How often the agent sends heartbeats.
  std::uint32_t heartbeat_interval_ms = 1000;
  /// The agent tears down when nothing arrived from the launcher for this long; 0 = never
  /// (a local agent relies on stdin EOF alone).
  std::uint32_t heartbeat_timeout_ms = 0;
  /// Time between SIGTERM and SIGKILL when ranks are killed.
  std::uint32_t kill_grace_ms = 3000;
  /// spdlog level name for the agent's own diagnostics (on its stderr).
  std::string log_level = "warning";
  /// The launcher's address as this host reaches it (the rendezvous address of its
  /// ranks); the agent answers with the interface that carries traffic toward it. Empty:
  /// no interface is looked up.
  std::string launcher_addr;
  /// Names this job on every host (its cgroup there is hvdrun-JOB-AGENTPID).
  std::string job_id;
  /// --network-interface, or empty: the agent reports that interface's addresses.
  std::string network_interface;
  /// Whether the agent reads its host's topology and sends it in its hello (a launch that
  /// binds, gives GPUs, names NICs or reports bindings): reading it costs hwloc's load.
  bool want_topology = false;
  bool operator==(const Hello&) const = default;
};

/// Agent's opening frame, sent once the launcher's hello has arrived.
struct AgentHello {
  std::uint32_t version = kVersion;
  /// The agent's pid on its host.
  std::uint32_t pid = 0;
  /// gethostname() of the agent's host.
  std::string hostname;
  /// A TCP port that was free on the agent's host a moment ago (MASTER_PORT for torch).
  std::uint16_t free_port = 0;
  /// The host's network interface toward the hello's launcher_addr (HOROVOD_GLOO_IFACE and
  /// NCCL_SOCKET_IFNAME of its ranks), or empty when it cannot be told.
  std::string iface;
  /// The addresses of the hello's network_interface on this host (empty without one).
  std::vector<std::string> iface_addrs;
  /// The host's topology as topology_to_wire() writes it, when the hello asked for it and
  /// it could be read; else empty.
  std::string topology;
  bool operator==(const AgentHello&) const = default;
};

/// Start one rank.
struct Spawn {
  std::int32_t rank = 0;
  /// argv[0] is looked up in the rank's own PATH when it has no '/'.
  std::vector<std::string> argv;
  /// Working directory; must exist on the host.
  std::string cwd;
  /// Which of the agent's own variables the rank starts from: names, a trailing '*' for a
  /// prefix, "*" for all of them.
  std::vector<std::string> host_env;
  /// NAME=VALUE each, set over those.
  std::vector<std::string> env;
  /// NAME=VALUE each, set only where neither of the above names them.
  std::vector<std::string> env_defaults;
  /// How many of the rank's last stderr lines to send back with its exit report.
  std::uint32_t stderr_tail_lines = 10;
  /// Give the rank a control channel (HVDRUN_CONTROL_FD; in-process elastic recovery).
  bool control = false;
  bool operator==(const Spawn&) const = default;
};

/// A rank was exec'd successfully.
struct RankStarted {
  std::int32_t rank = 0;
  std::int32_t pid = 0;
  bool operator==(const RankStarted&) const = default;
};

/// Bytes a rank wrote. On decode, `data` points into the decoder's buffer and is valid only
/// until the decoder is next fed or asked for a frame.
struct Output {
  std::int32_t rank = 0;
  Stream stream = Stream::out;
  std::string_view data;
  bool operator==(const Output&) const = default;
};

/// A rank ended; all its output frames precede this one.
struct RankExited {
  std::int32_t rank = 0;
  /// True: killed by signal `value`; false: exited with code `value`.
  bool signaled = false;
  std::int32_t value = 0;
  /// The last lines it wrote to stderr, oldest first, without newlines.
  std::vector<std::string> stderr_tail;
  /// The traceback its error file (TORCHELASTIC_ERROR_FILE) holds, when it failed and wrote
  /// one; else empty.
  std::string traceback;
  bool operator==(const RankExited&) const = default;
};

/// Kill every rank: SIGTERM to each process group, then SIGKILL after `grace_ms`.
struct Kill {
  std::uint32_t grace_ms = 3000;
  bool operator==(const Kill&) const = default;
};

/// Liveness, both ways.
struct Heartbeat {
  bool operator==(const Heartbeat&) const = default;
};

/// The sender cannot go on (spawn failure, version mismatch, protocol error).
struct Fatal {
  /// The rank concerned, or -1.
  std::int32_t rank = -1;
  std::string message;
  bool operator==(const Fatal&) const = default;
};

/// Job control (Ctrl-Z on the launcher): stop every rank's process group (SIGSTOP) and
/// keep no silence limit until resumed, for the launcher stops itself next.
struct Suspend {
  bool operator==(const Suspend&) const = default;
};
/// Continue every rank's process group (SIGCONT); the silence limit counts from now.
struct Resume {
  bool operator==(const Resume&) const = default;
};
/// A rank was stopped by a signal (SIGSTOP, SIGTSTP: not by a suspend), or continued: a
/// stopped rank holds up the others, and a failure message names it.
struct RankStopped {
  std::int32_t rank = 0;
  /// The stopping signal, or 0 when the rank was continued.
  std::int32_t signal = 0;
  bool operator==(const RankStopped&) const = default;
};
/// A rank declared (through its control channel) that it runs under hvd.elastic.run.
struct RankElastic {
  std::int32_t rank = 0;
  std::int32_t generation = 0;
  bool operator==(const RankElastic&) const = default;
};

/// Where one surviving rank of the host is in the next generation.
struct RankPlacement {
  std::int32_t old_rank = 0;  ///< its rank in the ending generation (the agent's key)
  std::int32_t rank = 0;
  std::int32_t local_rank = 0;
  std::int32_t local_size = 1;
  std::int32_t cross_rank = 0;
  std::int32_t cross_size = 1;
  bool operator==(const RankPlacement&) const = default;
};

/// The job moves to `generation` in process: the agent tells each listed rank its place
/// (ending the current generation first when `failure`) and stops the host's other ranks.
struct Regenerate {
  std::int32_t generation = 0;
  std::string reason;
  bool failure = false;  ///< a failure: collectives in flight end now; else at a commit
  bool hosts_added = false;
  bool hosts_removed = false;
  std::int32_t size = 1;
  std::string rendezvous_addr;
  std::uint16_t rendezvous_port = 0;
  std::string secret;
  std::vector<RankPlacement> ranks;
  bool operator==(const Regenerate&) const = default;
};

/// A rank has shut down `generation` and waits for its place in the next.
struct RankLeft {
  std::int32_t rank = 0;
  std::int32_t generation = 0;
  bool operator==(const RankLeft&) const = default;
};

/// A signal the launcher received for the ranks (SIGUSR1 or SIGUSR2, as Slurm's --signal or
/// a spot instance's notice sends): the agent sends it to every rank's process.
struct Signal {
  std::int32_t signo = 0;
  bool operator==(const Signal&) const = default;
};

/// The job's verdict, sent just before the launcher closes the stream of an agent that is
/// a node's own hvdrun (join mode), which then exits with the job's code.
struct JobEnd {
  /// The launcher's exit code (0 when every rank succeeded).
  std::int32_t exit_code = 0;
  /// The failure report the launcher prints, or empty.
  std::string message;
  /// Whether the failure names this agent's host.
  bool this_host = false;
  bool operator==(const JobEnd&) const = default;
};

/// Asks for every rank's stack report: the agent signals each rank that can answer and
/// sends what they wrote within `wait_ms`.
struct StacksRequest {
  std::uint32_t id = 0;  ///< echoed in the answer
  std::uint32_t wait_ms = 3000;
  bool operator==(const StacksRequest&) const = default;
};

/// How one rank answered a stacks request.
enum class StackStatus : std::uint8_t {
  whole = 0,       ///< its report ends with the end line
  partial = 1,     ///< no end line within the wait: what it wrote by then (maybe nothing)
  no_handler = 2,  ///< it catches no stack signal (not an hvdrun program): text says more
};

/// One rank's stack report (common/stack_file.h), at most kMaxStackText bytes of it.
struct RankStacks {
  std::int32_t rank = 0;
  StackStatus status = StackStatus::whole;
  std::string text;
  bool operator==(const RankStacks&) const = default;
};
/// Largest report of one rank carried (a longer one keeps its start and its end).
inline constexpr std::size_t kMaxStackText = 64u << 10;

/// The answer to a stacks request: every running rank of the host.
struct Stacks {
  std::uint32_t id = 0;
  std::vector<RankStacks> ranks;
  bool operator==(const Stacks&) const = default;
};

/// Any decoded message.
using Message = std::variant<Hello, AgentHello, Spawn, RankStarted, Output, RankExited, Kill,
                             Heartbeat, Fatal, Suspend, Resume, RankStopped, RankElastic,
                             Regenerate, RankLeft, Signal, JobEnd, StacksRequest, Stacks>;

/// Appends the frame for `msg` to `out`. Throws ProtocolError when it would exceed
/// kMaxFrameBytes (for instance a spawn with a gigantic environment).
void encode(const Message& msg, ByteQueue& out);

/// Bytes of an output frame header (everything before the data).
inline constexpr std::size_t kOutputHeaderBytes = 4 + 1 + 4 + 1 + 4;
/// Writes an output frame header for `size` data bytes at `dst` (kOutputHeaderBytes long);
/// the data must follow it directly. Lets the agent read rank output straight into place.
void write_output_header(char* dst, std::int32_t rank, Stream stream, std::uint32_t size);

/// Incremental frame decoder. Feed bytes as they arrive; take messages with next().
class Decoder {
 public:
  /// Room for `n` more input bytes (read straight into it), then commit(n).
  char* prepare(std::size_t n) { return buf_.prepare(n); }
  /// Marks `n` bytes written through prepare() as received.
  void commit(std::size_t n) { buf_.commit(n); }
  /// Appends received bytes.
  void feed(std::string_view bytes) { buf_.append(bytes); }
  /// The next complete message, or nullopt when more bytes are needed. Throws
  /// ProtocolError on a malformed frame; the decoder is unusable afterwards.
  std::optional<Message> next();
  /// Bytes received but not yet decoded.
  std::size_t buffered() const { return buf_.size(); }

 private:
  ByteQueue buf_;
  std::size_t pending_consume_ = 0;
  bool first_ = true;
};

/// Name of a frame type for messages ("spawn", "rank-exited", ...).
const char* type_name(const Message& msg);

}  // namespace hvdrun::launcher::proto
