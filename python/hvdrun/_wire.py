"""The small authenticated protocol between hvdrun.run (the caller) and its ranks
(hvdrun._task): the caller listens, each rank connects to it, both prove they hold the
per-run token, the rank fetches the function to run and sends back its result.

Handshake (all MACs HMAC-SHA256 under the token, compared with hmac.compare_digest):
  caller -> rank   server nonce (32 bytes)
  rank   -> caller rank (4 bytes, big endian), rank nonce (32 bytes),
                   MAC("rank" | server nonce | rank)
  caller -> rank   MAC("caller" | rank nonce | rank)
Then length-prefixed frames, each followed by MAC(direction | sequence | nonces | body),
so a frame cannot be forged, replayed or moved to another connection. Nothing is
unpickled before both sides are authenticated and the frame's MAC checks out.
"""
import hashlib
import hmac
import os
import struct

NONCE = 32
MAC = 32
# A frame's length is checked against this before anything is read (a result is bounded
# by the caller's memory anyway; this only stops a garbage length from allocating).
MAX_FRAME = 1 << 40


class AuthError(Exception):
    """The peer does not hold the token (or a frame was tampered with)."""


def mac(token, *parts):
    h = hmac.new(token, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


def recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


class Channel:
    """Frames over an authenticated socket."""

    def __init__(self, sock, token, server_nonce, rank_nonce, is_caller):
        self.sock = sock
        self.token = token
        self.nonces = server_nonce + rank_nonce
        self.send_dir = b"c>r" if is_caller else b"r>c"
        self.recv_dir = b"r>c" if is_caller else b"c>r"
        self.sent = 0
        self.received = 0

    def send(self, body):
        seq = struct.pack(">Q", self.sent)
        self.sent += 1
        tag = mac(self.token, self.send_dir, seq, self.nonces, body)
        self.sock.sendall(struct.pack(">Q", len(body)) + body + tag)

    def recv(self):
        (n,) = struct.unpack(">Q", recv_exact(self.sock, 8))
        if n > MAX_FRAME:
            raise AuthError(f"frame of {n} bytes announced")
        body = recv_exact(self.sock, n)
        tag = recv_exact(self.sock, MAC)
        seq = struct.pack(">Q", self.received)
        self.received += 1
        if not hmac.compare_digest(tag, mac(self.token, self.recv_dir, seq, self.nonces, body)):
            raise AuthError("a frame's MAC does not match")
        return body


HELLO = 4 + NONCE + MAC  # what a rank sends after the caller's nonce


def caller_verify(token, server_nonce, hello):
    """Checks a rank's hello (HELLO bytes) against the nonce the caller sent; returns
    (rank, reply to send, rank nonce). Raises AuthError for a peer without the token."""
    rank_bytes, rank_nonce, tag = hello[:4], hello[4:4 + NONCE], hello[4 + NONCE:]
    if len(hello) != HELLO or not hmac.compare_digest(
            tag, mac(token, b"rank", server_nonce, rank_bytes)):
        raise AuthError("the peer's MAC does not match the run's token")
    (rank,) = struct.unpack(">I", rank_bytes)
    return rank, mac(token, b"caller", rank_nonce, rank_bytes), rank_nonce


def caller_handshake(sock, token):
    """The caller's side, blocking; returns (rank, Channel). Raises AuthError for a peer
    without the token. (The collector of hvdrun.run runs the same steps without
    blocking: caller_verify.)"""
    server_nonce = os.urandom(NONCE)
    sock.sendall(server_nonce)
    rank, reply, rank_nonce = caller_verify(token, server_nonce, recv_exact(sock, HELLO))
    sock.sendall(reply)
    return rank, Channel(sock, token, server_nonce, rank_nonce, True)


def rank_handshake(sock, token, rank):
    """A rank's side; returns a Channel. Raises AuthError when the listener does not
    hold the token."""
    server_nonce = recv_exact(sock, NONCE)
    rank_bytes = struct.pack(">I", rank)
    rank_nonce = os.urandom(NONCE)
    sock.sendall(rank_bytes + rank_nonce + mac(token, b"rank", server_nonce, rank_bytes))
    reply = recv_exact(sock, MAC)
    if not hmac.compare_digest(reply, mac(token, b"caller", rank_nonce, rank_bytes)):
        raise AuthError("the caller's MAC does not match the run's token")
    return Channel(sock, token, server_nonce, rank_nonce, False)
