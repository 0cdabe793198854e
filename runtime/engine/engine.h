// The collective engine: every collective of this process is queued here and runs once
// every rank has agreed on it (runtime/engine/negotiation.h). Whoever drives — a background
// thread, or the caller of a blocking collective when nothing else is running, which
// saves a thread hop — takes the driver's seat and runs rounds, every one through the same
// round(): this rank's brief, one exchange, the decision, the collectives it made ready
// run in the same order on every rank. A blocking collective alone in a steady state is a
// case of that round (announced alone, its small input riding in the brief), not a path
// beside it. A disagreement fails that collective on every rank that submitted it and the
// job goes on; a transport failure (a peer lost, a timeout) is fatal: every later
// collective fails with it.
//
// Locking, for every private function unless its comment says otherwise: mu_ held on entry
// and exit. The driver gives it up only around a round's exchange and decision (state only
// the driver touches) and around bodies that move data.
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
  /// A host allreduce whose data can carry the round's exchange in its own first step
  /// (every rank of the engine on one host, over shared memory: HostComm::allreduce_agreed).
  /// Beside its first chunk, this rank's block (`used` of `bytes` at `mine`) goes in and
  /// every rank's comes out at `all`, `bytes` apart, as Hooks::exchange moves them (a rank
  /// running Hooks::exchange in that round meets it). `agreed()`, which every rank answers
  /// alike from the blocks, then says whether its data goes on. Returns true once its
  /// result is written (postscale applied: all its body would have done), false when it did
  /// not go on (nothing written; the round goes on from the blocks). Throws what
  /// Hooks::exchange and the body throw.
  using Lead = std::function<bool(const void* mine, std::size_t used, void* all, std::size_t bytes,
                                  const std::function<bool()>& agreed)>;
  /// Submits and waits: a blocking collective. Rethrows its error. `result`: see
  /// InlineResult (an allreduce with `small_input` only). `token`, when not 0, names the
  /// bytes of `req` (its seq aside): a caller that submits one request again and again
  /// passes the same token with it each time, and a token never stands for two different
  /// requests in a process (new_token()); the engine then looks the request up in its
  /// cache once per token.
  void run(const Request& req, Body body, const void* small_input = nullptr,
           const InlineResult* result = nullptr, std::uint64_t token = 0);
  /// run() of a host allreduce whose input does not ride in the round, with its `lead` (see
  /// Lead): used when the collective is announced alone, its body otherwise.
  void run(const Request& req, Body body, std::uint64_t token, const Lead& lead);
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

  // What this rank announces in a round, when not the window of its queue's head: one
  // cached collective alone, the steady state of a blocking one (run() with nothing else
  // queued). Announced by its cache id, its small input riding in the brief. When every
  // rank announced the same alone the round runs it at once (and reduces the briefs'
  // payloads into `result` when every rank carried its input); otherwise the round goes on
  // as any other, this collective what this rank announced in it.
  struct Alone {
    const Request* req = nullptr;  // its request, seq included
    std::int64_t id = -1;          // its cache id
    // Its queued slot; nullptr for a small allreduce run() did not queue (it finishes in
    // the round, or the round queues it as the oldest, built in `built`).
    Slot* slot = nullptr;
    const void* input = nullptr;  // `bytes` of input riding in the brief (0: none)
    std::size_t bytes = 0;
    const InlineResult* result = nullptr;  // where a result reduced from the briefs goes
    // Not queued: its body, moved into a slot built (and queued) only when the round does
    // not finish it.
    Body* body = nullptr;
    std::shared_ptr<Slot> built;
    // Its data carries the round (Lead): when every rank announced it so, its data has
    // moved by the time the round is decided.
    const Lead* lead = nullptr;
  };

  static std::shared_ptr<Slot> make_slot(const Request& req, Body body = nullptr,
                                         Body then = nullptr, const void* small_input = nullptr);
  // Queues `slot` (assigning its seq) and returns it, or a slot that has already failed
  // when the job is over here.
  std::shared_ptr<Slot> enqueue(std::shared_ptr<Slot> slot, std::unique_lock<std::mutex>& lock);
  // Waits for `slot`, driving rounds while nobody else does.
  void await(const std::shared_ptr<Slot>& slot, std::unique_lock<std::mutex>& lock);
  // run() of a small unnamed allreduce in the steady state, announced alone and not
  // queued: when every rank announced it alone its result is the briefs' payloads reduced
  // into `result` and no slot is built. Returns false (and does nothing) when the engine is
  // not in that state. Rethrows the collective's error.
  bool run_unqueued(const Request& req, Body& body, const void* input, const InlineResult& result,
                    std::uint64_t token, std::unique_lock<std::mutex>& lock);
  // run() of any other collective: queued on this stack, announced alone when it is alone
  // and cached (its data carrying the round when it has a `lead`), then waited for (and
  // driven).
  void run_queued(const Request& req, Body body, const void* small_input,
                  const InlineResult* result, std::uint64_t token, const Lead* lead,
                  std::unique_lock<std::mutex>& lock);
  // True when nothing stops a round of one collective alone (no driver, no failure, no
  // timeline to mark), the queue aside.
  bool may_go_alone() const {
    return !driving_ && !stopping_ && failure_.empty() &&
           (hooks_.timeline == nullptr || !hooks_.timeline->enabled());
  }

  // Takes the driver's seat and runs rounds until `until` is done (nullptr: until nothing
  // is queued), the first one announcing `alone` when given (then until its collective is
  // done); gives the seat up.
  void drive(std::unique_lock<std::mutex>& lock, const Slot* until, Alone* alone = nullptr);
  // drive() itself, inlined where run() calls it (engine_round.cc).
  void drive_inline(std::unique_lock<std::mutex>& lock, const Slot* until, Alone* alone);
  // One round, the only way through one: this rank's brief (the window of its queue's
  // unannounced head, or `alone`), the exchange, the decision, the collectives it made
  // ready run in the agreed order, a pause when it agreed on nothing. The driver's seat
  // held; mu_ given up around the exchange and the decision, and in execute().
  // `unproductive`: rounds that agreed on nothing just before (the pause grows with it).
  // Returns false when the round failed (every queued collective has then failed).
  bool round(std::unique_lock<std::mutex>& lock, Alone* alone, int& unproductive);
  // What a round decided: the collective announced alone finished in the round itself,
  // reduced from the briefs or moved by its lead (kRode), one collective every rank
  // announced alone (kSteady), a plan to make from the windows the briefs rebuild
  // (kExpanded) or from whole windows exchanged (kLearned).
  enum class Decision { kRode, kSteady, kExpanded, kLearned };
  // The round's exchange carried by `alone`'s lead; `finished` once its data has moved
  // (every rank announced it alone with its lead). mu_ not held. The failure, if any.
  std::exception_ptr lead_round(Alone& alone, bool& finished);
  // A round's decision from every brief, inside the exchange (mu_ not held; only the
  // driver touches what it reads and writes): `fresh`, the `count` collectives this rank
  // announced (`window_built`: window_ holds them), `head` for the transport's message.
  // Sets `broken` when the decision fails (the windows' exchange, a cache id unknown).
  Decision decide(Slot** fresh, std::uint32_t count, bool window_built, const Request* head,
                  std::exception_ptr& broken);
  // The slot of what `alone` announced: its queued one, or one built in alone.built.
  // Driver only, mu_ not needed: inside the exchange.
  static Slot* slot_of(Alone& alone);
  // The rest of a round once decided: the plan, the collectives it made ready.
  // Returns whether the round made anything ready or anyone announced anything.
  bool run_ready(Decision how, Slot** fresh, std::uint32_t count,
                 std::unique_lock<std::mutex>& lock);
  // The end of a round in which every rank carried `alone`'s small allreduce: its result
  // already reduced, its slot (when queued) taken out and done.
  void finish_riding(Alone& alone);
  // Writes brief_ for `alone`.
  void announce_alone(const Alone& alone);
  // Whether this rank waits for a collective: queued, or in an unqueued round.
  bool waits() const;
  // The cache id of `req`, through the last token's when `token` is that one.
  std::int64_t cached_id(const Request& req, std::uint64_t token);
  // The driver's seat: taken (the round's buffers sized) and given up.
  void begin_round();
  void end_round();
  // This rank's queued collectives not announced yet, oldest first (at most kWindow).
  std::uint32_t fresh_slots(Slot** fresh);
  // window_ for those collectives. Driver only; reads only the slots.
  void fill_window(Slot* const* fresh, std::uint32_t count);
  // Bytes of `s`'s input that ride in the round (0: none).
  std::size_t inline_size(const Slot& s) const;
  std::size_t inline_limit() const { return std::min(hooks_.inline_limit, kInlineCapacity); }
  // A round's exchange begins: the timeline's cycle marked, the round published for stall
  // reports, mu_ given up. Returns the submissions seen so far (the pause after a round
  // that agreed on nothing ends at a new one).
  std::uint64_t enter_exchange(std::unique_lock<std::mutex>& lock);
  // The round's exchange is over: mu_ taken back, the round counted.
  void leave_exchange(std::unique_lock<std::mutex>& lock);
  // Exchanges brief_ into briefs_; the failure, if any. mu_ not held.
  std::exception_ptr gather_briefs(const Request* head);
  // Runs one planned collective: this rank's own, or a stand-in; mu_ given up around a
  // body that moves data.
  void execute(const Ready& rd, std::unique_lock<std::mutex>& lock);
  // Marks this rank's `slot` done once its collective has run (or failed).
  void finish(Slot& slot);
  // Fails every queued collective: the first `attempted` with `error` itself (they were
  // in the round that failed), the rest as not run.
  void fail_all(const std::exception_ptr& error, std::size_t attempted = 0);
  void wake_waiters();
  // Timeline: marks which ranks announced this rank's queued collectives this round.
  void mark_ready(bool from_briefs);  // mu_ not needed: driver only
  // Queues this rank's own shutdown when another rank's is in the round's table.
  void join_shutdown(const std::vector<Window>& table);
  // The seq that marks a shutdown this rank joined rather than asked for.
  static constexpr std::int64_t kAutoShutdown = -7;
  void worker();
  void watch_stalls();
  std::string stall_text(std::chrono::milliseconds waited, bool in_round,
                         const std::vector<int>& absent);
  std::exception_ptr not_run(const std::string& what) const;
  void release_name(const Request& req);
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
  // run_unqueued()'s collective, with its seq, and the token it was copied for;
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
