"""An OpenFlow 1.3 peer that says it is a switch: enough of the protocol to be sent a switch's program.

It answers HELLO, FEATURES_REQUEST (with the datapath id it claims), echo, barrier and every multipart
request (with an empty reply), and records the type of every message it is sent, so a test can say
exactly what a connection got. It is what an attacker who reaches the controller's port would write
(issue 40 found that 60 such lines were sent a ToR's whole program).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time

HELLO, ERROR, ECHO_REQUEST, ECHO_REPLY, FEATURES_REQUEST, FEATURES_REPLY = 0, 1, 2, 3, 5, 6
PACKET_OUT, FLOW_MOD, GROUP_MOD = 13, 14, 15
MULTIPART_REQUEST, MULTIPART_REPLY, BARRIER_REQUEST, BARRIER_REPLY, METER_MOD = 18, 19, 20, 21, 29
HANDSHAKE = {HELLO, FEATURES_REQUEST, ECHO_REQUEST, ECHO_REPLY, ERROR}


def _msg(mtype: int, xid: int, body: bytes = b"") -> bytes:
    return struct.pack("!BBHI", 4, mtype, 8 + len(body), xid) + body


class FakeSwitch:
    """``FakeSwitch(("127.0.0.1", port), dpid).start()``; ``.got`` lists the message types received."""

    def __init__(self, address, dpid: int | None, tls: ssl.SSLContext | None = None):
        """``dpid`` None: it answers echo but never says which switch it is (no FEATURES_REPLY)."""
        self.address, self.dpid, self.tls = address, dpid, tls
        self.got: list[int] = []
        self.closed = threading.Event()
        self.error = ""
        self.sock = None
        self.mute = False  # True: echo requests go unanswered (a half-open connection, a hung switch)

    def start(self, timeout: float = 5.0) -> FakeSwitch:
        raw = socket.create_connection(self.address, timeout=timeout)
        try:
            self.sock = self.tls.wrap_socket(raw, server_hostname="127.0.0.1") if self.tls else raw
        except (ssl.SSLError, OSError) as e:
            self.error = str(e)
            raw.close()
            self.closed.set()
            return self
        self.sock.settimeout(None)
        try:  # with TLS 1.3 the client's handshake ends before the server has judged its certificate: a
            # refused peer may learn it here, on its first write, as the server's close (SSLEOFError)
            self.sock.sendall(_msg(HELLO, 1))
        except (ssl.SSLError, OSError) as e:
            self.error = str(e)
            self.close()
            self.closed.set()
            return self
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _serve(self) -> None:
        try:
            while True:
                version, mtype, length, xid = struct.unpack("!BBHI", self._recv(8))
                if version != 4 or length < 8:  # a TLS alert, or anything else that is not OpenFlow 1.3
                    self.error = f"not OpenFlow 1.3 (first bytes {version:02x}{mtype:02x})"
                    break
                body = self._recv(length - 8) if length > 8 else b""
                self.got.append(mtype)
                if mtype == FEATURES_REQUEST and self.dpid is not None:
                    self.sock.sendall(_msg(FEATURES_REPLY, xid, struct.pack("!QIBB2xII", self.dpid, 256, 254, 0,
                                                                            0x4F, 0)))
                elif mtype == ECHO_REQUEST and not self.mute:
                    self.sock.sendall(_msg(ECHO_REPLY, xid, body))
                elif mtype == BARRIER_REQUEST:
                    self.sock.sendall(_msg(BARRIER_REPLY, xid))
                elif mtype == MULTIPART_REQUEST:
                    kind = struct.unpack("!H", body[:2])[0]
                    self.sock.sendall(_msg(MULTIPART_REPLY, xid, struct.pack("!HH4x", kind, 0)))
        except (EOFError, OSError, struct.error) as e:
            self.error = self.error or type(e).__name__
        finally:
            self.closed.set()

    def program(self) -> list[int]:
        """What it got beyond the handshake: flow, group and meter mods, packet-outs, read-backs."""
        return [t for t in self.got if t not in HANDSHAKE]

    def wait_for(self, mtype: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if mtype in self.got:
                return True
            if self.closed.is_set():
                return False
            time.sleep(0.05)
        return False

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
