"""hvdrun.run(): Horovod's `horovod.run` over the `hvdrun` launcher.

The caller listens on a TCP port, starts `hvdrun ... python -m hvdrun._task` and hands
each rank the port and a random per-run token through the environment (forwarded with
`-x`, never on a command line). Each rank connects back to the launching host
(HVDRUN_RENDEZVOUS_ADDR), both sides authenticate with the token (hvdrun/_wire.py), the
rank fetches the pickled function and returns its pickled result or exception. No
shared filesystem is needed.
"""
import json
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from hvdrun import _preauth, _wire

try:
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the machine
    import pickle as _pickle


class JobFailed(RuntimeError):
    """The job run by hvdrun.run() failed. `exit_code` is the launcher's exit status,
    `message` its own error lines (which name the failing rank and quote its stderr),
    and `__cause__` the exception a rank raised, when it could be sent back."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


_UNSUPPORTED = {
    "min_num_proc": "elastic runs (hvdrun --min-np ... on the command line)",
    "max_num_proc": "elastic runs (hvdrun --max-np ... on the command line)",
    "min_np": "elastic runs (hvdrun --min-np ... on the command line)",
    "max_np": "elastic runs (hvdrun --max-np ... on the command line)",
    "slots": "hosts='host:slots,...'",
    "reset_limit": "elastic runs (hvdrun --reset-limit on the command line)",
    "cooldown_range": "elastic runs (hvdrun --blacklist-cooldown-range on the command line)",
    "host_discovery_script": "elastic runs (hvdrun --host-discovery-script on the command "
                             "line)",
    "mpi_args": "nothing: hvdrun has no MPI",
}

_TAGGED = re.compile(r"^\[\d+\]<std(out|err)>:")


def _is_user_module(module):
    """True for a module of the user's own code (not installed, not the standard
    library): ranks may not be able to import it, so its functions travel by value."""
    path = getattr(module, "__file__", None)
    if not path or module.__name__ == "__main__":
        return False
    path = os.path.realpath(path)
    installed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return not any(path.startswith(p + os.sep) for p in installed) and \
        "-packages" + os.sep not in path


def _dumps_function(wrapped, func):
    module = sys.modules.get(getattr(func, "__module__", None) or "")
    by_value = (module is not None and _is_user_module(module)
                and hasattr(_pickle, "register_pickle_by_value"))
    if by_value:
        _pickle.register_pickle_by_value(module)
    try:
        return _pickle.dumps(wrapped)
    finally:
        if by_value:
            _pickle.unregister_pickle_by_value(module)


def _launcher():
    path = os.environ.get("HVDRUN_LAUNCHER")
    if path:
        return path
    path = shutil.which("hvdrun")
    if path:
        return path
    beside = os.path.join(os.path.dirname(sys.executable), "hvdrun")
    if os.access(beside, os.X_OK):
        return beside
    raise FileNotFoundError(
        "hvdrun.run: the hvdrun launcher was not found (not in HVDRUN_LAUNCHER, not on "
        f"PATH, not beside {sys.executable}); install hvdrun with pip or set "
        "HVDRUN_LAUNCHER to its path")


def _interface_ipv4(name):
    """The first IPv4 address of interface `name`, or None."""
    import fcntl
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                                 struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None


def _bind_address(cmd, env, network_interface):
    """Where the collector listens: where the launcher's own rendezvous listens and the
    ranks connect (HVDRUN_RENDEZVOUS_ADDR): 127.0.0.1 when every host of the plan is this
    one, the --network-interface address when one is given, else every interface (remote
    ranks reach this machine by an address only their SSH connections tell). The plan is
    the launcher's own (--dry-run --json), so hosts, hostfiles and allocations are read
    the one way they are read for the job; None (every interface) when it cannot be told."""
    if network_interface:
        return _interface_ipv4(network_interface)
    try:
        out = subprocess.run(cmd[:1] + ["--dry-run", "--json"] + cmd[1:] + ["true"], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                             check=False)
        plan = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        plan = None
    if plan and plan.get("hosts") and all(h.get("method") == "local" for h in plan["hosts"]):
        return "127.0.0.1"
    return None


def _listen(address=None):
    if address is not None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.bind((address, 0))
    else:
        try:
            s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", 0))
        except OSError:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("0.0.0.0", 0))
    s.listen(socket.SOMAXCONN)
    return s


class _Handshake:
    """A connection that has not yet proven the run's token."""

    def __init__(self, conn, source, deadline):
        self.conn = conn
        self.source = source
        self.deadline = deadline
        self.nonce = os.urandom(_wire.NONCE)
        self.hello = bytearray()
        self.cap_id = 0


class _Collector:
    """Accepts the ranks' connections, serves the payload, collects the results.

    The handshakes of all connections run on one thread without blocking, under the
    pre-authentication policy of every hvdrun port (hvdrun/_preauth.py): a deadline of a
    few seconds, a cap per source and in all, and when a cap is reached the oldest pending
    connection of the busiest source is closed, never the newcomer. A thread is started
    only for a connection that has proven the token, and at most one per rank."""

    def __init__(self, sock, token, payload, num_proc, where):
        self.sock = sock
        self.token = token
        self.payload = payload
        self.num_proc = num_proc
        self.where = where
        self.lock = threading.Lock()
        self.results = {}  # rank -> ("R", value) or ("E", (text, exception or None))
        self.claimed = set()
        self.workers = []
        self.stop = False
        self.cap = _preauth.PendingCap()
        self.log = _preauth.LogLimiter()
        self.pending = set()
        self.rejected = 0
        self.accept_paused_until = 0.0
        sock.setblocking(False)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(sock, selectors.EVENT_READ, "accept")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.thread = threading.Thread(target=self._loop, name="hvdrun-run-accept",
                                       daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            while not self.stop:
                now = time.monotonic()
                wait = 0.25
                if self.pending:
                    wait = min(wait, max(0.0, min(h.deadline for h in self.pending) - now))
                if self.accept_paused_until:
                    wait = min(wait, max(0.0, self.accept_paused_until - now))
                for key, _ in self.sel.select(wait):
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self.wake_r.recv(64)
                    elif key.data in self.pending:
                        self._advance(key.data)
                now = time.monotonic()
                if self.accept_paused_until and now >= self.accept_paused_until:
                    self.accept_paused_until = 0.0
                    self.sel.register(self.sock, selectors.EVENT_READ, "accept")
                for h in [h for h in self.pending if h.deadline <= now]:
                    self._drop(h)
        finally:
            for h in list(self.pending):
                self._drop(h)
            self.sel.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return
            except OSError as e:
                # Out of descriptors (or the like): keep serving what is open, try again
                # shortly instead of spinning on a listener that stays readable.
                self.log.warn(f"accept {e.errno}",
                              f"hvdrun.run: accepting on {self.where} failed: {e.strerror}; "
                              "retrying in 100 ms")
                self.sel.unregister(self.sock)
                self.accept_paused_until = time.monotonic() + 0.1
                return
            conn.setblocking(False)
            h = _Handshake(conn, _preauth.peer_source(conn),
                           time.monotonic() + _preauth.HANDSHAKE_TIMEOUT)
            try:
                if conn.send(h.nonce) != len(h.nonce):
                    raise OSError("short write")
            except OSError:
                conn.close()
                continue
            self.pending.add(h)
            self.sel.register(conn, selectors.EVENT_READ, h)
            h.cap_id = self.cap.add(h.source, lambda h=h: self._evict(h))

    def _evict(self, h):
        self.log.warn("pending cap",
                      f"hvdrun.run: too many connections to the result port ({self.where}) "
                      f"that have not authenticated (limits: {self.cap.per_source} per source, "
                      f"{self.cap.total} in all); closing the oldest from {h.source}. "
                      "Something other than the job's ranks is connecting "
                      "(docs/security.md)")
        self._drop(h)

    def _drop(self, h):
        if h not in self.pending:
            return
        self.pending.discard(h)
        self.cap.remove(h.cap_id)
        try:
            self.sel.unregister(h.conn)
        except (KeyError, ValueError):
            pass
        h.conn.close()

    def _advance(self, h):
        try:
            data = h.conn.recv(_wire.HELLO - len(h.hello))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(h)
            return
        h.hello += data
        if len(h.hello) < _wire.HELLO:
            return
        conn = h.conn
        self.pending.discard(h)
        self.cap.remove(h.cap_id)
        self.sel.unregister(conn)
        try:
            rank, reply, rank_nonce = _wire.caller_verify(self.token, h.nonce, bytes(h.hello))
            if conn.send(reply) != len(reply):
                raise OSError("short write")
        except _wire.AuthError:
            self.rejected += 1
            self.log.warn("wrong token",
                          f"hvdrun.run: rejected a connection from {h.source} to the result "
                          f"port ({self.where}): it does not hold the run's token")
            conn.close()
            return
        except OSError:
            conn.close()
            return
        conn.setblocking(True)
        chan = _wire.Channel(conn, self.token, h.nonce, rank_nonce, True)
        worker = threading.Thread(target=self._serve, args=(conn, rank, chan),
                                  name=f"hvdrun-run-rank-{rank}", daemon=True)
        with self.lock:
            if rank >= self.num_proc or rank in self.claimed:
                conn.close()
                return
            self.claimed.add(rank)
            self.workers.append(worker)
        worker.start()

    def _serve(self, conn, rank, chan):
        try:
            chan.send(self.payload)
            body = chan.recv()
            kind = body[:1]
            try:
                value = _pickle.loads(body[1:])
            except Exception as e:  # noqa: BLE001 - reported as that rank's failure
                kind, value = b"E", (f"hvdrun.run: rank {rank}'s result cannot be "
                                     f"unpickled in the caller: {e!r}\n", b"")
            if kind == b"E":
                text, exc = value
                try:
                    exc = _pickle.loads(exc) if exc else None
                except Exception:  # noqa: BLE001 - the traceback text still says it all
                    exc = None
                value = (text, exc)
            with self.lock:
                self.results[rank] = (kind, value)
        except (OSError, EOFError, _wire.AuthError, ValueError):
            pass  # a broken connection; the job's exit status decides
        finally:
            conn.close()

    def close(self, grace=30.0):
        """Stops accepting; waits up to `grace` seconds for results still arriving (the
        ranks have exited: what they sent is in the socket buffers)."""
        self.stop = True
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass
        self.thread.join()
        self.sock.close()
        self.wake_r.close()
        self.wake_w.close()
        deadline = time.monotonic() + grace
        with self.lock:
            workers = list(self.workers)
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None,
        ssh_identity_file=None, disable_cache=None, output_filename=None, verbose=None,
        use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None,
        ssh_config=None, env=None):
    """Runs `func(*args, **kwargs)` on every rank of an hvdrun job and returns the list
    of its return values, indexed by rank. The arguments are horovod.run's.

    Arguments:
        func: the function (pickled with cloudpickle, so lambdas and closures work).
        args, kwargs: its arguments.
        num_proc (or np): number of ranks.
        hosts: "host1:2,host2:4" (default localhost:num_proc); hostfile: a hostfile path.
        start_timeout: seconds for preflight, agent start and rendezvous.
        ssh_port, ssh_identity_file: as hvdrun -p and -i; ssh_config: as --ssh-config.
        output_filename: as --output-filename; verbose: as --verbose.
        network_interface(s): one interface name (hvdrun uses one per job).
        executable: the Python the ranks run (default sys.executable); hvdrun must be
            importable there on every host.
        env: extra environment variables for the ranks (dict).
        use_gloo: accepted (hvdrun never uses MPI: host memory always takes its own
        path); use_mpi=True, mpi_args and the elastic arguments raise NotImplementedError.

    Raises:
        JobFailed: a rank failed; the message is the launcher's (rank, host, exit code,
            the rank's last stderr lines), chained to the rank's exception.
    """
    num_proc, network_interfaces = _check_arguments(
        num_proc, np, use_mpi, network_interface, network_interfaces,
        dict(min_num_proc=min_num_proc, max_num_proc=max_num_proc, slots=slots,
             reset_limit=reset_limit, cooldown_range=cooldown_range,
             host_discovery_script=host_discovery_script, mpi_args=mpi_args,
             min_np=min_np, max_np=max_np))
    kwargs = kwargs or {}

    def wrapped():
        return func(*args, **kwargs)

    payload = _dumps_function(wrapped, func)
    token = secrets.token_bytes(32)

    cmd = _launcher_command(num_proc, hosts=hosts, hostfile=hostfile,
                            start_timeout=start_timeout, ssh_port=ssh_port,
                            ssh_identity_file=ssh_identity_file, ssh_config=ssh_config,
                            output_filename=output_filename,
                            network_interfaces=network_interfaces, verbose=verbose)
    child_env = dict(os.environ)
    child_env.update({k: str(v) for k, v in (env or {}).items()})
    bind = _bind_address(cmd, child_env, network_interfaces[0] if network_interfaces else None)
    listener = _listen(bind)
    port = listener.getsockname()[1]
    child_env["HVDRUN_RUN_PORT"] = str(port)
    child_env["HVDRUN_RUN_TOKEN"] = token.hex()
    forward = ["HVDRUN_RUN_PORT", "HVDRUN_RUN_TOKEN"] + sorted(env or {})
    for name in ("PYTHONPATH", "HVDRUN_LIBRARY"):
        if name in child_env and name not in forward:
            forward.append(name)
    for name in forward:
        cmd += ["-x", name]
    cmd += [executable or sys.executable, "-m", "hvdrun._task"]

    where = f"{bind}:{port}" if bind else f"port {port} on every interface"
    collector = _Collector(listener, token, payload, num_proc, where)
    try:
        code, own_lines = _run_launcher(cmd, child_env)
    finally:
        collector.close()
    return _outcome(collector, code, own_lines, num_proc)


def _check_arguments(num_proc, np, use_mpi, network_interface, network_interfaces, given):
    """run()'s checks of horovod.run arguments hvdrun does not take; returns the number of
    ranks and the network interface list."""
    for name, value in given.items():
        if value is not None:
            raise NotImplementedError(
                f"hvdrun.run({name}=...) is not supported; use {_UNSUPPORTED[name]}")
    if use_mpi:
        raise NotImplementedError("hvdrun.run(use_mpi=True): hvdrun has no MPI; leave "
                                  "use_mpi unset (Gloo is always used)")
    if np is not None:
        num_proc = np
    if network_interface and network_interfaces:
        raise ValueError("give network_interface or network_interfaces, not both")
    if network_interface:
        network_interfaces = network_interface.split(",")
    if network_interfaces and len(network_interfaces) > 1:
        raise NotImplementedError(
            "hvdrun.run: hvdrun takes one network interface per job "
            f"(got {network_interfaces}); pass one")
    return num_proc, network_interfaces


def _launcher_command(num_proc, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                      ssh_config, output_filename, network_interfaces, verbose):
    """The hvdrun command line for run()'s launcher arguments (the rank command and -x
    come after)."""
    cmd = [_launcher(), "-np", str(num_proc)]
    if hosts:
        cmd += ["-H", hosts]
    if hostfile:
        cmd += ["--hostfile", str(hostfile)]
    if start_timeout is not None:
        cmd += ["--start-timeout", str(int(start_timeout))]
    if ssh_port is not None:
        cmd += ["-p", str(ssh_port)]
    if ssh_identity_file:
        cmd += ["-i", str(ssh_identity_file)]
    if ssh_config:
        cmd += ["--ssh-config", str(ssh_config)]
    if output_filename:
        cmd += ["--output-filename", str(output_filename)]
    if network_interfaces:
        cmd += ["--network-interface", network_interfaces[0]]
    if verbose:
        cmd += ["--verbose"]
    return cmd


def _run_launcher(cmd, child_env):
    """Runs the launcher to its end, relaying its stderr as it comes; returns its exit
    status and its own (untagged) stderr lines, the last 60."""
    own_lines = []
    proc = None
    try:
        proc = subprocess.Popen(cmd, env=child_env, stdin=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        for raw in proc.stderr:
            sys.stderr.write(raw.decode(errors="replace"))
            line = raw.decode(errors="replace").rstrip("\n")
            if not _TAGGED.match(line):
                own_lines.append(line)
                del own_lines[:-60]
        sys.stderr.flush()
        return proc.wait(), own_lines
    except BaseException:
        # Interrupted (Ctrl-C in the caller): hvdrun stops every rank on SIGINT.
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise


def _outcome(collector, code, own_lines, num_proc):
    """run()'s answer: every rank's result by rank, or JobFailed with the launcher's
    message, chained to the first failed rank's exception."""
    with collector.lock:
        results = dict(collector.results)
    failures = sorted((r, v) for r, (k, v) in results.items() if k == b"E")
    if code == 0 and not failures and len(results) == num_proc:
        return [results[r][1] for r in range(num_proc)]
    message = "\n".join(own_lines).strip()
    if failures:  # the traceback, which the rank sent here instead of printing it
        raised = f"rank {failures[0][0]} raised:\n{failures[0][1][0]}".rstrip("\n")
        message = f"{message}\n{raised}" if message else raised
    if not message:
        missing = sorted(set(range(num_proc)) - set(results))
        message = (f"hvdrun exited with {code}; no result from ranks {missing}")
    err = JobFailed(f"hvdrun.run: the job failed (hvdrun exit status {code}):\n{message}",
                    code if code != 0 else 1)
    cause = failures[0][1][1] if failures else None
    if isinstance(cause, BaseException):
        raise err from cause
    raise err
