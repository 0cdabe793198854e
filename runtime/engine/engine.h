// The collective engine: every collective of this process is queued here and runs once
// every rank has agreed on it (runtime/engine/negotiation.h). Whoever drives — a background
// thread, or the caller of a blocking collective when nothing else is running, which
// saves a thread hop — puts the head of the queue into a round, plans it, and runs the
// collectives the round made ready, in the same order on every rank. A disagreement
// fails that collective on every rank that submitted it and the job goes on; a transport
// failure (a peer lost, a timeout) is fatal: every later collective fails with it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/core/timeline.h"
#include "runtime/engine/negotiation.h"

namespace hvdrun::runtime {

/// When the engine reports and ends a stall (Horovod's variables).
struct StallPolicy {
  /// HOROVOD_STALL_CHECK_TIME_SECONDS (60): after this long without progress while
  /// collectives wait, the waiting rank logs once which ranks are missing what.
  std::chrono::milliseconds check{60000};
  /// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0: never): after this long, the rank ends
  /// itself with that message (exit 70), so the launcher stops the job.
  std::chrono::milliseconds shutdown{0};
  /// HOROVOD_STALL_CHECK_DISABLE: no stall reports at all.
  bool disabled = false;
};

/// A collective submitted with a name that another one still in flight carries.
class DuplicateName : public Error {
 public:
  using Error::Error;
};

/// Thrown by a collective's body when it finds, before any data moved, a reason to refuse
/// that every rank finds alike (an alltoall output too small for what the agreed splits
/// send it): the collective fails on every rank and, unlike a transport failure, the job
/// goes on.
class Refused : public Error {
 public:
  using Error::Error;
};

/// Runs collectives once the ranks agree on them; hands out handles to wait on.
class Engine {
 public:
  /// Moves a ready collective's data; the Ready is the round's agreed view of it. When
  /// the Ready has inline_data (a small allreduce carried in the round) and the collective
  /// has no `then`, the body runs with the engine's lock held: it must only reduce the
  /// round's payloads (reduce_inline) and never call the engine.
  using Body = std::function<void(const Ready&)>;
  using Handle = std::int64_t;

  /// What the engine needs from the job.
  struct Hooks {
    /// One exchange of a round, an allgather: this rank's block of `bytes` at `mine` in,
    /// every rank's block out at `all` (rank order, `bytes` apart). Only the first `used`
    /// bytes of a block carry anything (each rank's own `used`, which its block's header
    /// says): a transport may move just those and leave the rest of each block at `all`
    /// as it was. `head` is the oldest collective this rank has queued (nullptr when none),
    /// for the message when the transport fails, which throws.
    std::function<void(const void* mine, std::size_t used, void* all, std::size_t bytes,
                       const Request* head)>
        exchange;
    /// Runs a ready collective this rank did not submit because it has joined (zeros or
    /// the op's identity for an allreduce, nothing for a barrier).
    std::function<void(const Ready&)> stand_in;
    /// Stall reports: the text of a stall, logged once per stall; `ends_job` is set
    /// when the shutdown time has passed (the hook then ends the process).
    std::function<void(const std::string& text, bool ends_job)> stall;
    /// Says (through the rendezvous) that this rank is inside round `round`: called once
    /// a round has lasted half the stall check time.
    std::function<void(long long round)> arrived;
    /// Ranks that have not said they are inside round `round` (a stall inside a round's
    /// exchange, where this rank cannot see them); empty when unknown.
    std::function<std::vector<int>(long long round)> missing_from_round;
    /// Where each collective's phases are recorded (NEGOTIATE_<KIND>, then <KIND>), when
    /// it is writing; may be null.
    Timeline* timeline = nullptr;
    /// Most bytes of a small host allreduce's input that ride in the round: kInlineBytes,
    /// or kInlineBytesLocal when `exchange` moves only the used bytes (every rank on one
    /// host). The same on every rank: a round's blocks are sized from it.
    std::size_t inline_limit = kInlineBytes;
  };

  Engine(Hooks hooks, int size, StallPolicy stall);
  /// stop().
  ~Engine();
  /// Stops the background threads; collectives still queued fail (call shutdown() first
  /// to let them complete), later submissions are refused. Idempotent.
  void stop();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues `req` (its seq is assigned here when unnamed) with the body that moves its
  /// data; `then`, when given, runs right after a successful body on the engine's thread,
  /// before the handle completes (it may submit the next step of a composite operation,
  /// which then follows at the same point of the agreed order on every rank). Returns a handle (>
  /// 0). Throws DuplicateName when a collective of the same name is still in flight (submitted and
  /// its handle not yet waited for), Error after a fatal failure.
  Handle submit(Request req, Body body, Body then = nullptr, const void* small_input = nullptr);
  /// Where a blocking small host allreduce puts its result when every rank carried its
  /// input in the round: run() then reduces the round's payloads into `recv` itself, as
  /// the body would (reduce_payloads), without calling the body.
  struct InlineResult {
    void* recv = nullptr;
    std::size_t count = 0;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
  };
  /// Submits and waits: a blocking collective. Rethrows its error. `result`: see
  /// InlineResult (an allreduce with `small_input` only). `token`, when not 0, names the
  /// bytes of `req` (its seq aside): a caller that submits one request again and again
  /// passes the same token with it each time, and a token never stands for two different
  /// requests in a process (new_token()); the engine then looks the request up in its
  /// cache once per token.
  void run(const Request& req, Body body, const void* small_input = nullptr,
           const InlineResult* result = nullptr, std::uint64_t token = 0);
  /// A token no other caller in this process has (for run()).
  static std::uint64_t new_token();
  /// True once the collective behind `h` has finished. Throws Error for an unknown handle.
  bool poll(Handle h);
  /// Waits for `h`, forgets it (its name may be used again) and rethrows its error.
  void wait(Handle h);
  /// The position among this rank's unnamed collectives given to `h`, -1 when named.
  std::int64_t seq_of(Handle h);
  /// Number of handles not yet waited for.
  std::int64_t pending();
  /// Waits until every rank has joined, standing in for their collectives meanwhile;
  /// returns the rank that joined last.
  int join();
  /// Waits until every rank has called shutdown(), running what they still agree on;
  /// collectives that can then never complete fail. After a fatal failure it returns at
  /// once. Returns false when the job had failed.
  bool shutdown();
  /// What this rank waits in, for the stack report (common/stack_file.h): the oldest
  /// collective ("allreduce 'loss' float32[4]"), how many more, and how long the queue has
  /// not moved ("waiting 61 s", unless the stall inspector is disabled); "" when none.
  /// Waits at most `patience` for the engine's lock. Never called on the collective path.
  std::string wait_report(std::chrono::milliseconds patience);
  /// The first fatal failure's message, "" while there was none.
  std::string failure();
  /// True once a shutdown completed here because another rank asked for it (as in
  /// Horovod, one rank's shutdown shuts every rank down): the caller retires the engine,
  /// and init() joins afresh. Later submissions fail saying so.
  bool closed();

 private:
  // One exchange of blocks of `block` bytes (at most `stride`) into `all`, `stride` apart.
  void gather(const void* mine, std::size_t used, void* all, std::size_t block, std::size_t stride,
              const Request* head);

  struct Slot {
    Slot() = default;
    explicit Slot(const Request& r) : req(r) {}  // no cleared request copied over
    Request req;
    Body body;
    Body then;
    const void* small_input = nullptr;  // a small host allreduce's input, carried inline
    bool announced = false;  // put into a round already (each collective is announced once)
    std::string row;         // its timeline row ("" while the timeline is off)
    bool done = false;
    std::exception_ptr error;
    int result = -1;  // join: the last rank to join
  };

  static std::shared_ptr<Slot> make_slot(const Request& req, Body body = nullptr,
                                         Body then = nullptr, const void* small_input = nullptr);
  // Queues `slot` (assigning its seq) and returns it, or a slot that has already failed
  // when the job is over here. mu_ held.
  std::shared_ptr<Slot> enqueue(std::shared_ptr<Slot> slot, std::unique_lock<std::mutex>& lock);
  // Waits for `slot`, driving rounds while nobody else does.
  void await(const std::shared_ptr<Slot>& slot, std::unique_lock<std::mutex>& lock);
  // Runs rounds until `until` holds or nothing is queued; mu_ held on entry and exit.
  // `unproductive`: rounds that agreed on nothing just before (the pause grows with it).
  void drive(std::unique_lock<std::mutex>& lock, const std::function<bool()>& until,
             int unproductive = 0);
  // The steady state of a blocking collective, when nothing else is queued and the
  // request is cached: this thread sends the brief drive() would send, and when every
  // rank announced this same collective alone it runs at once; otherwise the round goes
  // on as drive()'s would, and so does driving until `slot` is done. Returns false (and
  // does nothing) when the engine is not in that state. mu_ held on entry and exit.
  bool express(Slot& slot, std::unique_lock<std::mutex>& lock, const InlineResult* result,
               std::uint64_t token);
  // run() once the collective is queued: express(), else waiting (and driving) until it
  // is done. mu_ held.
  void run_queued(const Request& req, Body body, const void* small_input,
                  const InlineResult* result, std::uint64_t token,
                  std::unique_lock<std::mutex>& lock);
  // express() for a blocking unnamed allreduce whose input rides in the round, before any
  // slot is built: when every rank announced it alone, the briefs' payloads are reduced
  // into `result` and nothing is queued. Otherwise the collective is queued as the oldest
  // and run as express() would, `body` moved into its slot. Returns false (and does
  // nothing) when the engine is not in express()'s state. mu_ held on entry and exit;
  // rethrows the collective's error.
  bool express_inline(const Request& req, Body& body, const void* input, const InlineResult& result,
                      std::uint64_t token, std::unique_lock<std::mutex>& lock);
  // An express round whose briefs were not the steady state (`broken`: not exchanged):
  // it goes on as drive()'s would, and so do the rounds after it until `slot`, the one
  // collective this rank announced in it, is done or the rounds fail. mu_ not held on
  // entry, held on exit; the driver's seat given up.
  void go_on(Slot& slot, std::exception_ptr broken, std::uint64_t seen,
             std::unique_lock<std::mutex>& lock);
  // The end of an express round in which every rank carried the same small allreduce
  // alone: the briefs' payloads, which this driver owns until end_round(), reduced into
  // `result`, and the round closed. `slot`: the queued slot that was it, taken out and done;
  // nullptr for express_inline()'s, which was never queued. mu_ not held on entry (the
  // exchange's), held on exit.
  void finish_riding(const InlineResult& result, Slot* slot, std::unique_lock<std::mutex>& lock);
  // Writes brief_ for a window of one cached request, `bytes` of `input` riding in it.
  void announce_alone(std::int64_t id, std::int64_t seq, const void* input, std::size_t bytes);
  // Whether this rank waits for a collective: queued, or in an express round. mu_ held.
  bool waits() const;
  // The cache id of `req`, through the last token's when `token` is that one. mu_ held.
  std::int64_t cached_id(const Request& req, std::uint64_t token);
  // The driver's seat: taken (the round's buffers sized) and given up. mu_ held.
  void begin_round();
  void end_round();
  // This rank's queued collectives not announced yet, oldest first (at most kWindow).
  // mu_ held.
  std::uint32_t fresh_slots(Slot** fresh);
  // window_ for those collectives. Driver only; reads only the slots.
  void fill_window(Slot* const* fresh, std::uint32_t count);
  // Bytes of `s`'s input that ride in the round (0: none).
  std::size_t inline_size(const Slot& s) const;
  std::size_t inline_limit() const { return std::min(hooks_.inline_limit, kInlineCapacity); }
  // A round's exchange begins: the timeline's cycle marked, the round published for stall
  // reports, mu_ given up. Returns the submissions seen so far (settle()'s pause ends at a
  // new one).
  std::uint64_t enter_exchange(std::unique_lock<std::mutex>& lock);
  // The round's exchange is over: mu_ taken back, the round counted.
  void leave_exchange(std::unique_lock<std::mutex>& lock);
  // Exchanges brief_ into briefs_; the failure, if any. mu_ not held.
  std::exception_ptr gather_briefs(const Request* head);
  // The rest of a round once the briefs are exchanged (`broken`: they were not), applied
  // alike whoever sent this rank's brief: whole windows when some rank needs them, the
  // plan, the collectives it made ready, a pause when it agreed on nothing. `fresh` are the
  // `count` collectives this rank announced in it; `window_built`: window_ holds them
  // already. mu_ not held on entry, held on exit. Returns false when the round failed.
  bool settle(std::unique_lock<std::mutex>& lock, std::exception_ptr broken, const Request* head,
              Slot** fresh, std::uint32_t count, bool window_built, std::uint64_t seen,
              int& unproductive);
  // Runs one planned collective: this rank's own, or a stand-in.
  void execute(const Ready& rd, std::unique_lock<std::mutex>& lock);
  // Marks this rank's `slot` done once its collective has run (or failed). mu_ held.
  void finish(Slot& slot);
  // Fails every queued collective: the first `attempted` with `error` itself (they were
  // in the round that failed), the rest as not run. mu_ held.
  void fail_all(const std::exception_ptr& error, std::size_t attempted = 0);
  void wake_waiters();  // mu_ held
  // Timeline: marks which ranks announced this rank's queued collectives this round.
  void mark_ready(bool from_briefs);  // mu_ not needed: driver only
  // Queues this rank's own shutdown when another rank's is in the round's table.
  void join_shutdown(const std::vector<Window>& table);  // mu_ held
  // The seq that marks a shutdown this rank joined rather than asked for.
  static constexpr std::int64_t kAutoShutdown = -7;
  void worker();
  void watch_stalls();
  std::string stall_text(std::chrono::milliseconds waited, bool in_round,
                         const std::vector<int>& absent);  // mu_ held
  std::exception_ptr not_run(const std::string& what) const;
  void release_name(const Request& req);  // mu_ held
  std::shared_ptr<Slot> find(Handle h, const char* fn);

  Hooks hooks_;
  int size_;
  StallPolicy stall_;
  std::mutex mu_;
  // cv_: slots completing, the driver's seat coming free, a pause ending; worker_cv_: work
  // for the background driver; stall_cv_: the stall inspector's ticks. Kept apart so that
  // a blocking collective wakes nobody who has nothing to do.
  std::condition_variable cv_;
  std::condition_variable worker_cv_;
  std::condition_variable stall_cv_;
  int waiting_ = 0;       // threads waiting on cv_ for a slot or the driver's seat
  bool pausing_ = false;  // the driver is pausing after a round that agreed on nothing
  std::deque<std::shared_ptr<Slot>> queue_;  // submitted, not yet run, submission order
  std::unordered_map<Handle, std::shared_ptr<Slot>> slots_;
  std::unordered_multiset<std::uint64_t> names_;  // names of slots not yet waited for
  Handle next_ = 1;
  std::int64_t next_seq_ = 0;  // the next unnamed collective's position
  std::uint64_t submissions_ = 0;
  bool driving_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  // Shut down because a peer did: written under mu_, read by closed() without it (every
  // collective's entry asks, api_detail::joined()).
  std::atomic<bool> closed_{false};
  std::string closed_by_;  // "rank 0", for messages
  std::string failure_;
  JoinBook book_;  // touched by the driver only
  // For stall reports: the last round's table, when the queue last moved, whether the
  // driver is inside an exchange (and which round), and whether this stall was reported.
  JoinBook last_book_;
  // The driver's round: this rank's window and brief, every rank's briefs and windows
  // (reused, not reallocated), and the requests earlier rounds agreed on.
  Window window_;
  Brief brief_;
  std::vector<Brief> briefs_;
  std::vector<Window> table_;
  std::vector<unsigned char> packed_;  // a round's blocks when they are smaller than the structs
  Plan plan_;
  RequestCache cache_;
  // The last token run() was given with a cached request, its id and the cache's epoch.
  std::uint64_t token_ = 0;
  std::int64_t token_id_ = -1;
  std::uint64_t token_epoch_ = 0;
  // express_inline()'s collective, with its seq, and the token it was copied for;
  // `expressing_` while its round runs (it is not queued then): for stall reports.
  Request express_head_;
  std::uint64_t express_token_ = 0;
  bool expressing_ = false;
  std::uint64_t progress_ = 0;  // bumped when a collective completes or a wait begins
  long long exchanging_round_ = -1;
  long long rounds_ = 0;
  bool stall_reported_ = false;
  // When the queue last moved, as the stall inspector saw it (to a tick). mu_ held.
  std::chrono::steady_clock::time_point progress_since_{};
  std::thread thread_;
  std::thread stall_thread_;
};

}  // namespace hvdrun::runtime
