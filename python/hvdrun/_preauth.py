"""The pre-authentication policy of hvdrun's listening ports, on the Python side (the
collector of hvdrun.run). The launcher's ports follow the same policy through
common/preauth_gate.h; the two are kept alike by hand and by the same tests:

- a connection is *pending* until it has proven the secret; its handshake runs without
  holding a thread, and it has HANDSHAKE_TIMEOUT seconds for it;
- pending connections are capped, TOTAL in all and PER_SOURCE per source: the uid owning
  the other end when it is on this host (so another local user can only crowd out
  itself), else the remote address;
- beyond PER_SOURCE a source's own oldest pending connection is closed; beyond TOTAL,
  the oldest pending connection among those of the sources holding the most (walking
  pending connections oldest first, the first whose source's count is the maximum), so
  ties between sources are settled by age; never the newcomer (were the rule ever to pick
  it, the oldest pending connection overall would go instead). The scenarios of
  tests/common/pending_cap_cases.txt are run against this class and the C++ one;
- warnings an outsider can cause are rate-limited: the first line of a cause, then at most
  one per LOG_INTERVAL seconds saying how many were held back.
"""
import collections
import errno
import socket
import struct
import sys
import threading
import time

HANDSHAKE_TIMEOUT = 5.0
TOTAL = 256
PER_SOURCE = 64
LOG_INTERVAL = 10.0


class PendingCap:
    """Pending connections, oldest first. Beyond `per_source` a source loses its oldest;
    beyond `total`, the oldest among those of the sources holding the most goes, never the
    newcomer (the module's rule, common/pending_cap.h). Single-threaded."""

    def __init__(self, total=TOTAL, per_source=PER_SOURCE):
        self.total = max(total, 1)
        self.per_source = max(per_source, 1)
        self.entries = collections.OrderedDict()  # id -> (source, evict)
        self.counts = collections.Counter()
        self.next_id = 1
        self.evicted = 0

    def add(self, source, evict):
        """Tracks a new pending connection; returns its id. Calls `evict` of older ones
        that must make room (never this one's)."""
        new = self.next_id
        self.next_id += 1
        self.entries[new] = (source, evict)
        self.counts[source] += 1
        if self.counts[source] > self.per_source:
            self._evict(self._oldest_from(source))
        while len(self.entries) > self.total:
            self._evict(self._victim_for(new))
        return new

    def remove(self, ident):
        """Stops tracking `ident` (it authenticated or closed); unknown ids are ignored."""
        entry = self.entries.pop(ident, None)
        if entry is None:
            return
        self.counts[entry[0]] -= 1
        if self.counts[entry[0]] <= 0:
            del self.counts[entry[0]]

    def from_source(self, source):
        return self.counts.get(source, 0)

    def __len__(self):
        return len(self.entries)

    def _oldest_from(self, source):
        for ident, (src, _) in self.entries.items():
            if src == source:
                return ident
        return None

    def _victim_for(self, new):
        """The entry to evict when the total is broken by `new`'s arrival: oldest first, the
        first whose source holds the most (ties settled by age, not by the Counter's
        order); the oldest overall should that be the newcomer."""
        most = max(self.counts.values())
        for ident, (src, _) in self.entries.items():
            if self.counts[src] == most:
                return ident if ident != new else next(iter(self.entries))
        return next(iter(self.entries))

    def _evict(self, ident):
        if ident is None:
            return
        _, evict = self.entries[ident]
        self.remove(ident)
        self.evicted += 1
        evict()


class LogLimiter:
    """Warnings to stderr, at most one line per cause per interval; the next line that is
    written says how many were held back (common/log_limiter.h). Thread-safe."""

    MAX_CAUSES = 64

    def __init__(self, interval=LOG_INTERVAL, stream=None):
        self.interval = interval
        self.stream = stream
        self.lock = threading.Lock()
        self.causes = {}  # cause -> [last written (monotonic), held back]
        self.lines = 0

    def warn(self, cause, message):
        now = time.monotonic()
        with self.lock:
            if cause not in self.causes and len(self.causes) >= self.MAX_CAUSES:
                cause = "(other causes)"
            entry = self.causes.get(cause)
            if entry is not None and now - entry[0] < self.interval:
                entry[1] += 1
                return
            held = entry[1] if entry is not None else 0
            self.causes[cause] = [now, 0]
            self.lines += 1
        if held:
            message += f" (and {held} more like it in the last {self.interval:g} s)"
        stream = self.stream or sys.stderr
        stream.write(message + "\n")
        stream.flush()


# --- who is at the other end --------------------------------------------------------

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_TCP_LISTEN = 10
_NOCOOKIE = 0xFFFFFFFF


def _end(sockaddr, family):
    """(family, 16 address bytes, port) of a socket address; IPv4-mapped IPv6 as IPv4."""
    host, port = sockaddr[0], sockaddr[1]
    if family == socket.AF_INET6:
        raw = socket.inet_pton(socket.AF_INET6, host.split("%")[0])
        if raw[:12] == b"\0" * 10 + b"\xff\xff":
            return socket.AF_INET, raw[12:] + b"\0" * 12, port
        return socket.AF_INET6, raw, port
    return socket.AF_INET, socket.inet_pton(socket.AF_INET, host) + b"\0" * 12, port


def _mapped(end):
    return socket.AF_INET6, b"\0" * 10 + b"\xff\xff" + end[1][:4], end[2]


def _diag_uid(peer, me):
    """The uid of the socket whose local end is `peer` and remote end `me`: an int,
    "absent", or None when sock_diag cannot answer."""
    try:
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
    except OSError:
        return None
    with nl:
        req = struct.pack("=BBBBI", peer[0], socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
        req += struct.pack("!HH", peer[2], me[2]) + peer[1] + me[1]
        req += struct.pack("=III", 0, _NOCOOKIE, _NOCOOKIE)
        msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, 1, 0, 0) + req
        try:
            nl.settimeout(1.0)
            nl.sendto(msg, (0, 0))
            data = nl.recv(4096)
        except OSError:
            return None
    if len(data) < 20:
        return None
    kind = struct.unpack_from("=H", data, 4)[0]
    if kind == _NLMSG_ERROR:
        return "absent" if struct.unpack_from("=i", data, 16)[0] == -errno.ENOENT else None
    if kind != _SOCK_DIAG_BY_FAMILY or len(data) < 16 + 72:
        return None
    state = data[17]
    dport = struct.unpack_from("!H", data, 16 + 6)[0]
    if state == _TCP_LISTEN or dport != me[2]:
        return "absent"
    return struct.unpack_from("=I", data, 16 + 4 + 48 + 12)[0]


def _proc_uid(peer, me):
    """As _diag_uid, from /proc/net/tcp or tcp6."""
    def text(end):
        if end[0] == socket.AF_INET:
            return "%08X:%04X" % (struct.unpack("=I", end[1][:4])[0], end[2])
        words = struct.unpack("=4I", end[1])
        return "".join("%08X" % w for w in words) + ":%04X" % end[2]

    path = "/proc/net/tcp" if peer[0] == socket.AF_INET else "/proc/net/tcp6"
    local, remote = text(peer), text(me)
    try:
        with open(path) as f:
            next(f, None)
            for line in f:
                cols = line.split()
                if len(cols) > 7 and cols[1] == local and cols[2] == remote and cols[3] != "0A":
                    return int(cols[7])
    except OSError:
        return None
    return "absent"


def peer_source(sock):
    """The pending cap's unit for a connected TCP socket: "uid N on this host" when the
    other end is a socket on this host, else the remote address."""
    try:
        family = sock.family
        peer = _end(sock.getpeername(), family)
        me = _end(sock.getsockname(), family)
    except OSError:
        return "unknown peer"
    tries = [(peer, me)]
    if peer[0] == socket.AF_INET:
        tries.append((_mapped(peer), _mapped(me)))
    for p, m in tries:
        uid = _diag_uid(p, m)
        if uid is None:
            uid = _proc_uid(p, m)
        if isinstance(uid, int):
            return f"uid {uid} on this host"
    address = socket.inet_ntop(peer[0], peer[1][:4] if peer[0] == socket.AF_INET else peer[1])
    return address
