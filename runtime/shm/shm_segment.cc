// The host's shared segment (see shm_segment.h): local rank 0 creates the memfd and serves
// it on an abstract unix socket; the other local ranks connect, say who they are and
// receive it as SCM_RIGHTS.
#include "runtime/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "common/log.h"
#include "common/log_limiter.h"
#include "rendezvous/protocol.h"

namespace hvdrun::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::size_t kDefaultChunk = 256u << 10;
constexpr std::size_t kMaxDataBytes = 96u << 20;

// One byte with room for one descriptor as SCM_RIGHTS: what local rank 0 sends each local
// rank, and what that rank receives the segment's memfd into.
struct FdMessage {
  char byte = 'm';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file, gone with the last descriptor.
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof(a.sun_path) - 1));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// Waits until `fd` is readable (or writable) or the deadline passes.
bool poll_until(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const int left = poll_ms_left(deadline);
    if (left == 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, left);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw_errno("shared memory: waiting on a local socket", "poll");
  }
}

uid_t peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    throw_errno("shared memory: checking the local peer", "getsockopt(SO_PEERCRED)");
  return cred.uid;
}

// One local rank's end of the set-up: who it is, for its messages.
class SegmentCourier {
 public:
  SegmentCourier(const ShmMember& me, const std::string& who)
      : me_(me), who_(who), L_(me.local_size) {}

  UniqueFd create(rendezvous::Store* store, const std::string& key,
                  Clock::time_point deadline) const {
    std::size_t chunk = kDefaultChunk;
    if (const char* v = std::getenv("HVDRUN_SHM_CHUNK_BYTES"))
      chunk = std::max<std::size_t>(4096, std::strtoull(v, nullptr, 10));
    const std::size_t per_buffer_cap = kMaxDataBytes / shm::kBuffers / static_cast<std::size_t>(L_);
    chunk = std::max<std::size_t>(4096, std::min(chunk, per_buffer_cap)) / 4096 * 4096;
    const std::size_t data_offset =
        shm::round_up(shm::kHeaderBytes + shm::kLineBytes * static_cast<std::size_t>(L_), 4096);
    const std::size_t total = shm::segment_bytes(data_offset, static_cast<std::size_t>(L_), chunk);

    UniqueFd fd(static_cast<int>(::memfd_create("hvdrun-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
    if (!fd) throw_errno("shared memory: " + who_ + ": creating the segment", "memfd_create");
    if (::fchmod(fd.get(), 0600) != 0) throw_errno("shared memory: " + who_, "fchmod");
    if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0)
      throw_errno(
          "shared memory: " + who_ + ": sizing the segment to " + std::to_string(total) + " bytes",
          "ftruncate");
    // No rank can shrink it under the others (which would be SIGBUS), or grow it.
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
      throw_errno("shared memory: " + who_, "fcntl(F_ADD_SEALS)");
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) throw_errno("shared memory: " + who_ + ": mapping the segment", "mmap");
    auto* h = new (p) shm::Header;
    h->local_size = static_cast<std::uint32_t>(L_);
    h->chunk = chunk;
    h->data_offset = data_offset;
    h->total_bytes = total;
    for (int l = 0; l < L_; ++l)
      new (static_cast<char*>(p) + shm::kHeaderBytes +
           shm::kLineBytes * static_cast<std::size_t>(l)) shm::Line;
    ::munmap(p, total);
    if (L_ > 1) hand_out(fd, store, key, deadline);
    return fd;
  }

  // Hands the memfd to the other local ranks. The socket's name is random and travels
  // only through the authenticated store, or (without a store) is `key`, derived from
  // the job secret; both ends check the other's uid.
  void hand_out(const UniqueFd& fd, rendezvous::Store* store, const std::string& key,
                Clock::time_point deadline) const {
    const std::string name = store ? "hvdrun-" + hex(rendezvous::random_bytes(16)) : key;
    UniqueFd srv(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!srv) throw_errno("shared memory: " + who_, "socket(AF_UNIX)");
    socklen_t len = 0;
    auto addr = abstract_address(name, &len);
    const bool bound = ::bind(srv.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0;
    if (!bound && !store && errno == EADDRINUSE)
      throw Error("shared memory: " + who_ + ": another process of this job already holds " +
                  me_.host +
                  "'s segment socket: two processes were started as local rank 0 "
                  "(HVDRUN_LOCAL_RANK=0) of this host");
    if (!bound || ::listen(srv.get(), L_) != 0)
      throw_errno("shared memory: " + who_ + ": local socket @" + name, "bind/listen");
    if (store) store->set(key, name);
    int handed = 0;
    // Another user sees the socket's name in /proc/net/unix and may connect as often as it
    // likes: the first refusal is written, then one line per 10 s with a count.
    LogLimiter refusals(std::chrono::seconds(10), &hvdrun::log());
    const std::string socket_name = "hvdrun: " + who_ + ": the segment socket";
    // Global rank of each local rank that fetched the segment, -1 while it has not.
    std::vector<int> came(static_cast<std::size_t>(L_), -1);
    came[0] = me_.global_rank;
    while (handed < L_ - 1) {
      if (!poll_until(srv.get(), POLLIN, deadline)) {
        std::string absent;
        for (int l = 1; l < L_; ++l)
          if (came[static_cast<std::size_t>(l)] < 0)
            absent +=
                (absent.empty() ? "" : ", ") + std::to_string(me_.global_rank - me_.local_rank + l);
        refusals.flush(socket_name);
        throw Error("shared memory: " + who_ + ": local rank(s) " + absent +
                    " did not fetch the segment before the start timeout (" +
                    std::to_string(handed) + " of " + std::to_string(L_ - 1) +
                    " other local ranks did)");
      }
      UniqueFd c(::accept4(srv.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      if (const uid_t uid = peer_uid(c.get()); uid != ::geteuid()) {
        refusals.warn("refused uid " + std::to_string(uid),
                      "hvdrun: " + who_ + ": refused a local connection from uid " +
                          std::to_string(uid) + " to the segment socket");
        continue;
      }
      // A local rank says hello at once; anything else (a stray connection from another
      // process of this user) gets a second, not the whole start timeout.
      std::int32_t hello[2] = {-1, -1};
      if (!poll_until(c.get(), POLLIN,
                      std::min(deadline, Clock::now() + std::chrono::seconds(1))) ||
          ::recv(c.get(), hello, sizeof(hello), MSG_WAITALL | MSG_DONTWAIT) !=
              static_cast<ssize_t>(sizeof(hello)))
        continue;
      if (hello[0] <= 0 || hello[0] >= L_) continue;
      auto& first = came[static_cast<std::size_t>(hello[0])];
      if (first >= 0)
        throw Error(
            "shared memory: " + who_ + ": two processes asked for the segment as local rank " +
            std::to_string(hello[0]) + " (ranks " + std::to_string(first) + " and " +
            std::to_string(hello[1]) + "): every rank of a host needs its own HVDRUN_LOCAL_RANK");
      FdMessage m;
      cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      int raw = fd.get();
      std::memcpy(CMSG_DATA(cm), &raw, sizeof(int));
      if (::sendmsg(c.get(), &m.msg, MSG_NOSIGNAL) == 1) {
        first = hello[1];
        ++handed;
      }
    }
    refusals.flush(socket_name);
  }

  // Why local rank 0 may never serve this rank (only without a store, where its socket's
  // name is fixed and a second process of one local rank finds it too).
  std::string not_served() const {
    return "local rank 0 did not start, or it had already handed the segment to every "
           "local rank and this process is a second one with HVDRUN_LOCAL_RANK=" +
           std::to_string(me_.local_rank);
  }

  std::string waiting_for_leader() const {
    return "shared memory: " + who_ + ": waiting for local rank 0 (rank " +
           std::to_string(me_.global_rank - me_.local_rank) + ") to create the segment";
  }

  // Connects to local rank 0's socket: the name from the store, or (no store) `key`
  // itself, retried until local rank 0 has bound it or the deadline passes.
  UniqueFd connect_leader(rendezvous::Store* store, const std::string& key,
                          Clock::time_point deadline) const {
    std::optional<std::string> name = key;
    if (store) {
      store->wait({key}, time_left(deadline), waiting_for_leader());
      name = store->get(key);
      if (!name) throw Error("shared memory: " + who_ + ": the segment's socket name vanished");
    }
    auto pause = std::chrono::microseconds(500);
    for (;;) {
      UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!c) throw_errno("shared memory: " + who_, "socket(AF_UNIX)");
      socklen_t len = 0;
      auto addr = abstract_address(*name, &len);
      if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return c;
      const int err = errno;
      // Not bound yet (only without a store can this rank be early), or its backlog full.
      if (!store && (err == ECONNREFUSED || err == EAGAIN) && Clock::now() < deadline) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(50000));
        continue;
      }
      if (!store && err == ECONNREFUSED)
        throw Error(waiting_for_leader() + ": its socket did not accept within the start " +
                    "timeout (" + not_served() + ")");
      throw_errno("shared memory: " + who_ + ": connecting to local rank 0's socket @" + *name +
                      " (are all ranks of host " + me_.host + " in one network namespace?)",
                  "connect");
    }
  }

  UniqueFd fetch(rendezvous::Store* store, const std::string& key,
                 Clock::time_point deadline) const {
    UniqueFd c = connect_leader(store, key, deadline);
    const std::string name = store ? "local rank 0's socket" : "@" + key;
    if (peer_uid(c.get()) != ::geteuid())
      throw Error("shared memory: " + who_ + ": the process behind " + name +
                  " belongs to another user; refusing its segment");
    // Without a store, a connection local rank 0 closes unserved (this rank reached its
    // backlog as it finished handing out) is a second process of one local rank: the
    // close shows at the send or at the receive, whichever comes after it.
    const auto closed_unserved = [&] {
      return Error("shared memory: " + who_ + ": local rank 0 closed its socket without " +
                   "handing over the segment (" + not_served() + ")");
    };
    std::int32_t hello[2] = {me_.local_rank, me_.global_rank};
    if (::send(c.get(), hello, sizeof(hello), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sizeof(hello))) {
      if (!store && (errno == EPIPE || errno == ECONNRESET)) throw closed_unserved();
      throw_errno("shared memory: " + who_ + ": asking local rank 0 for the segment", "send");
    }
    if (!poll_until(c.get(), POLLIN, deadline))
      throw Error("shared memory: " + who_ +
                  ": local rank 0 did not hand over the segment before the start timeout");
    FdMessage m;
    const auto got = ::recvmsg(c.get(), &m.msg, MSG_CMSG_CLOEXEC);
    if (got != 1 && !store) throw closed_unserved();
    if (got != 1) throw_errno("shared memory: " + who_ + ": receiving the segment", "recvmsg");
    cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
    if (cm == nullptr || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
      throw Error("shared memory: " + who_ + ": local rank 0 sent no segment");
    int raw = -1;
    std::memcpy(&raw, CMSG_DATA(cm), sizeof(int));
    return UniqueFd(raw);
  }

 private:
  const ShmMember& me_;
  const std::string& who_;
  int L_;
};

}  // namespace

UniqueFd create_segment(rendezvous::Store* store, const std::string& key, const ShmMember& me,
                        const std::string& who, std::chrono::steady_clock::time_point deadline) {
  return SegmentCourier(me, who).create(store, key, deadline);
}

void hand_out_segment(const UniqueFd& memfd, rendezvous::Store* store, const std::string& key,
                      const ShmMember& me, const std::string& who,
                      std::chrono::steady_clock::time_point deadline) {
  SegmentCourier(me, who).hand_out(memfd, store, key, deadline);
}

UniqueFd fetch_segment(rendezvous::Store* store, const std::string& key, const ShmMember& me,
                       const std::string& who, std::chrono::steady_clock::time_point deadline) {
  return SegmentCourier(me, who).fetch(store, key, deadline);
}

std::string shm_socket_name(const Environment& env, const std::string& prefix) {
  const rendezvous::Hmac mac(env.secret);
  const auto tag = mac.tag({"hvdrun shm socket\n", prefix, "\n", env.hostname});
  return "hvdrun-" +
         rendezvous::to_hex(std::string_view(reinterpret_cast<const char*>(tag.data()), 16));
}

Mapping map_segment(int fd, int local_size, const std::string& who) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("shared memory: " + who, "fstat");
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes < shm::kHeaderBytes)
    throw Error("shared memory: " + who + ": the segment has " + std::to_string(bytes) +
                " bytes, less than its header; local rank 0 did not set it up");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw_errno("shared memory: " + who + ": mapping the segment", "mmap");
  const auto* header = std::launder(reinterpret_cast<const shm::Header*>(p));
  if (header->magic != shm::kMagic ||
      header->local_size != static_cast<std::uint32_t>(local_size) ||
      header->total_bytes != bytes ||
      shm::segment_bytes(header->data_offset, static_cast<std::size_t>(local_size),
                         header->chunk) != bytes) {
    const std::string theirs = std::to_string(header->local_size);
    ::munmap(p, bytes);
    throw Error("shared memory: " + who + ": the segment is not what local rank 0 (" + theirs +
                " local ranks) and this rank (" + std::to_string(local_size) +
                ") agree on; HVDRUN_LOCAL_SIZE differs between them, or they load different "
                "builds of libhvdrun?");
  }
  return Mapping{static_cast<char*>(p), bytes};
}

}  // namespace hvdrun::runtime
