"""The switch side of OpenFlow 1.3: bytes a controller sends, parsed as a switch parses them, applied to a
``SwitchTables``, and answered as Open vSwitch answers.

``Switch.receive(data)`` takes one or more whole messages and returns the replies (bytes) and what the
switch sent out of its ports (packet-outs). Understood: HELLO, ECHO_REQUEST, FEATURES_REQUEST,
SET_CONFIG, FLOW_MOD (add, modify, delete, delete-strict), GROUP_MOD, METER_MOD, PACKET_OUT,
BARRIER_REQUEST, ROLE_REQUEST and the multipart requests a controller reads a switch with (flows, groups,
meters, port descriptions, switch description). A change the tables refuse, a slave's change, a stale
generation id, a malformed or unknown message: an OFPT_ERROR with the type and code a real switch sends
and the offending message's first 64 bytes. Message bodies are read with os-ken's own parsers of the
parts a switch parses (matches, instructions, actions, buckets, meter bands) and, for the headers os-ken
parses only on the controller side, with the specification's layouts.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from types import SimpleNamespace

from ryu_apps.openflow import intents as it
from ryu_apps.openflow import ofmsg
from ryu_apps.openflow.framework import ofproto as ofp
from ryu_apps.openflow.framework import parser
from ryu_apps.simswitch.tables import OFPG_ANY, OFPP_ANY, Output, SwitchTables, TableError

HEADER = struct.Struct("!BBHI")
VERSION = ofp.OFP_VERSION
NO_BUFFER = ofp.OFP_NO_BUFFER
MULTIPART_CHUNK = 60000  # a multipart reply's body is cut into messages of at most this many bytes
_STUB = SimpleNamespace(ofproto=ofp, ofproto_parser=parser)  # what os-ken's serializers ask of a datapath


@dataclass
class Port:
    """A switch port as its port description gives it."""

    port_no: int
    name: str
    hw_addr: str = "02:00:00:00:00:01"
    curr_speed_kbps: int = 10_000
    up: bool = True


def messages(data: bytes) -> tuple[list[bytes], bytes]:
    """Whole messages at the front of a byte stream, and what is left of an unfinished one."""
    out, off = [], 0
    while len(data) - off >= HEADER.size:
        length = HEADER.unpack_from(data, off)[2]
        if length < HEADER.size:
            raise ValueError(f"a message of length {length}")
        if len(data) - off < length:
            break
        out.append(bytes(data[off:off + length]))
        off += length
    return out, bytes(data[off:])


def serialize(msg, xid: int | None = None) -> bytes:
    """The bytes of an os-ken message built with ``datapath=None`` (as ``ofmsg`` builds them)."""
    msg.datapath = _STUB
    if xid is not None:
        msg.set_xid(xid)
    elif msg.xid is None:
        msg.set_xid(0)
    msg.serialize()
    return bytes(msg.buf)


def _header(msg_type: int, xid: int, body: bytes) -> bytes:
    return HEADER.pack(VERSION, msg_type, HEADER.size + len(body), xid) + body


def error(xid: int, type_: int, code: int, data: bytes) -> bytes:
    return _header(ofp.OFPT_ERROR, xid, struct.pack("!HH", type_, code) + data[:64])


def _actions(buf: bytes, off: int, length: int) -> list:
    out, end = [], off + length
    while off < end:
        a = parser.OFPAction.parser(buf, off)
        out.append(a)
        off += a.len
    return out


def _group(msg: bytes) -> tuple[int, int, int, list]:
    """(command, type, group id, os-ken buckets) of a GROUP_MOD."""
    command, gtype, gid = struct.unpack_from(ofp.OFP_GROUP_MOD_PACK_STR, msg, HEADER.size)
    off, buckets = ofp.OFP_GROUP_MOD_SIZE, []
    while off < len(msg):
        b = parser.OFPBucket.parser(msg, off)
        buckets.append(b)
        off += b.len
    return command, gtype, gid, buckets


def _meter(msg: bytes) -> tuple[int, int, int, list]:
    """(command, flags, meter id, os-ken bands) of a METER_MOD."""
    command, flags, mid = struct.unpack_from(ofp.OFP_METER_MOD_PACK_STR, msg, HEADER.size)
    off, bands = ofp.OFP_METER_MOD_SIZE, []
    while off < len(msg):
        band = parser.OFPMeterBandHeader.parser(msg, off)
        bands.append(band)
        off += band.len
    return command, flags, mid, bands


def flow_stats(f: it.Flow, packets: int = 0, octets: int = 0) -> bytes:
    """One ofp_flow_stats entry (a flow-stats reply's body is a run of them)."""
    body = ofmsg.match_bytes(f.match) + ofmsg.instructions_bytes(f.actions, f.meter_id, f.goto)
    head = struct.pack(ofp.OFP_FLOW_STATS_0_PACK_STR, ofp.OFP_FLOW_STATS_0_SIZE + len(body), f.table_id, 0, 0,
                       f.priority, f.idle_timeout, f.hard_timeout, f.flags, f.cookie, packets, octets)
    return head + body


_GROUP_TYPES = {"all": ofp.OFPGT_ALL, "select": ofp.OFPGT_SELECT, "indirect": ofp.OFPGT_INDIRECT,
                "ff": ofp.OFPGT_FF}


def group_desc(g: it.Group, watch: tuple[int, ...]) -> bytes:
    buf = bytearray()
    for n, b in enumerate(g.buckets):
        ob = parser.OFPBucket(weight=b.weight if g.type == "select" else 0,
                              watch_port=watch[n] if n < len(watch) else OFPP_ANY, watch_group=OFPG_ANY,
                              actions=[ofmsg.action(a) for a in b.actions])
        ob.serialize(buf, len(buf))
    return struct.pack(ofp.OFP_GROUP_DESC_STATS_PACK_STR, ofp.OFP_GROUP_DESC_STATS_SIZE + len(buf),
                       _GROUP_TYPES[g.type], g.group_id) + bytes(buf)


def meter_config(m: it.Meter) -> bytes:
    band = bytearray()
    parser.OFPMeterBandDrop(rate=m.rate, burst_size=m.burst).serialize(band, 0)
    flags = ofp.OFPMF_BURST | ofp.OFPMF_STATS | (ofp.OFPMF_PKTPS if m.pktps else ofp.OFPMF_KBPS)
    return struct.pack(ofp.OFP_METER_CONFIG_PACK_STR, ofp.OFP_METER_CONFIG_SIZE + len(band), flags,
                       m.meter_id) + bytes(band)


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def port_desc(p: Port) -> bytes:
    state = 0 if p.up else ofp.OFPPS_LINK_DOWN
    return struct.pack(ofp.OFP_PORT_PACK_STR, p.port_no, _mac(p.hw_addr), p.name.encode()[:15], 0, state,
                       ofp.OFPPF_10GB_FD, 0, 0, 0, p.curr_speed_kbps, p.curr_speed_kbps)


@dataclass
class Switch:
    """A switch that takes OpenFlow messages: ``tables`` is what it holds."""

    name: str
    dpid: int = 0
    ports: dict[int, Port] = field(default_factory=dict)
    n_tables: int = 254
    tables: SwitchTables = None
    received: list = field(default_factory=list)  # (message type, xid) of everything it was sent, in order
    role: int = ofp.OFPCR_ROLE_EQUAL
    generation: int | None = None
    errors: list = field(default_factory=list)  # (type, code, why) of every error it answered

    def __post_init__(self):
        if self.tables is None:
            self.tables = SwitchTables(self.name, self.dpid & 0xFFFFFFFF)

    def port_status(self, port_no: int, up: bool) -> bytes:
        """A port's link goes down (or comes up): what the switch holds notes it (buckets watching it are
        no longer live) and the OFPT_PORT_STATUS it sends its controller is returned."""
        p = self.ports.get(port_no) or Port(port_no, f"p{port_no}")
        self.ports[port_no] = p = Port(p.port_no, p.name, p.hw_addr, p.curr_speed_kbps, up)
        (self.tables.down_ports.discard if up else self.tables.down_ports.add)(port_no)
        return _header(ofp.OFPT_PORT_STATUS, 0, struct.pack("!B7x", ofp.OFPPR_MODIFY) + port_desc(p))

    def receive(self, data: bytes) -> tuple[list[bytes], list[tuple[Output, bytes]]]:
        """Apply whole messages in order: (replies, and (output, frame) of every packet-out sent)."""
        msgs, rest = messages(data)
        if rest:
            raise ValueError(f"{self.name}: {len(rest)} bytes of an unfinished message")
        replies: list[bytes] = []
        sent: list = []
        for m in msgs:
            replies += self._one(m, sent)
        return replies, sent

    def _one(self, msg: bytes, sent: list) -> list[bytes]:
        version, mtype, _, xid = HEADER.unpack_from(msg)
        self.received.append((mtype, xid))
        if version != VERSION:
            return self._error(xid, ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_VERSION, msg, f"version {version}")
        try:
            return self._dispatch(mtype, xid, msg, sent)
        except TableError as e:
            return self._error(xid, e.type, e.code, msg, str(e))
        except (struct.error, ValueError, KeyError, IndexError, TypeError) as e:  # malformed: a real switch says so
            return self._error(xid, ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_LEN, msg, f"malformed: {e}")

    def _error(self, xid: int, type_: int, code: int, msg: bytes, why: str) -> list[bytes]:
        self.errors.append((type_, code, why))
        return [error(xid, type_, code, msg)]

    def _slave(self) -> bool:
        return self.role == ofp.OFPCR_ROLE_SLAVE

    def _dispatch(self, mtype: int, xid: int, msg: bytes, sent: list) -> list[bytes]:
        if mtype == ofp.OFPT_HELLO:
            return []
        if mtype == ofp.OFPT_ECHO_REQUEST:
            return [_header(ofp.OFPT_ECHO_REPLY, xid, msg[HEADER.size:])]
        if mtype == ofp.OFPT_FEATURES_REQUEST:
            return [_header(ofp.OFPT_FEATURES_REPLY, xid, struct.pack(ofp.OFP_SWITCH_FEATURES_PACK_STR, self.dpid, 0,
                                                                      self.n_tables, 0, 0x4F, 0))]
        if mtype in (ofp.OFPT_SET_CONFIG, ofp.OFPT_SET_ASYNC):
            return []
        if mtype == ofp.OFPT_BARRIER_REQUEST:
            return [_header(ofp.OFPT_BARRIER_REPLY, xid, b"")]
        if mtype == ofp.OFPT_ROLE_REQUEST:
            return self._role(xid, msg)
        if mtype == ofp.OFPT_MULTIPART_REQUEST:
            return self._multipart(xid, msg)
        if mtype in (ofp.OFPT_FLOW_MOD, ofp.OFPT_GROUP_MOD, ofp.OFPT_METER_MOD, ofp.OFPT_PACKET_OUT) and self._slave():
            return self._error(xid, ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE, msg, "a slave takes no changes")
        if mtype == ofp.OFPT_FLOW_MOD:
            self._flow_mod(ofmsg.flow_mod_fields(msg))
            return []
        if mtype == ofp.OFPT_GROUP_MOD:
            self._group_mod(*_group(msg))
            return []
        if mtype == ofp.OFPT_METER_MOD:
            self._meter_mod(*_meter(msg))
            return []
        if mtype == ofp.OFPT_PACKET_OUT:
            sent += self._packet_out(msg)
            return []
        return self._error(xid, ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_TYPE, msg, f"message type {mtype}")

    def _flow_mod(self, fm: ofmsg.FlowModFields) -> None:
        cmd = fm.command
        if cmd in (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT):
            f = fm.flow
            if cmd == ofp.OFPFC_ADD:
                self.tables.add_flow(f)
                return
            strict = cmd == ofp.OFPFC_MODIFY_STRICT
            for old in self.tables.delete_flows(f.table_id, fm.cookie, fm.cookie_mask, f.match, strict=strict,
                                                priority=f.priority):
                self.tables.add_flow(it.Flow(old.priority, old.match, f.actions, old.table_id, old.cookie,
                                             old.idle_timeout, old.hard_timeout, old.flags, f.meter_id, f.goto))
            return
        if cmd in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
            self.tables.delete_flows(fm.table_id, fm.cookie, fm.cookie_mask, fm.match,
                                     fm.out_port, fm.out_group, strict=cmd == ofp.OFPFC_DELETE_STRICT,
                                     priority=fm.priority)
            return
        raise ValueError(f"flow-mod command {cmd}")

    def _group_mod(self, command: int, gtype: int, gid: int, buckets: list) -> None:
        if command == ofp.OFPGC_DELETE:
            self.tables.delete_group(gid)
            return
        g = ofmsg.parse_group(SimpleNamespace(type=gtype, group_id=gid, buckets=buckets))
        if g.type not in _GROUP_TYPES:
            raise TableError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_TYPE, f"{self.name}: group type {gtype}")
        watch = tuple(b.watch_port for b in buckets)
        if command not in (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY):
            raise TableError(ofp.OFPET_GROUP_MOD_FAILED, ofp.OFPGMFC_BAD_COMMAND, f"group command {command}")
        self.tables.add_group(g, watch, modify=command == ofp.OFPGC_MODIFY)

    def _meter_mod(self, command: int, flags: int, mid: int, bands: list) -> None:
        if command == ofp.OFPMC_DELETE:
            self.tables.delete_meter(mid)
            return
        if command not in (ofp.OFPMC_ADD, ofp.OFPMC_MODIFY):
            raise TableError(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_BAD_COMMAND, f"meter command {command}")
        if len(bands) != 1 or not isinstance(bands[0], parser.OFPMeterBandDrop):
            raise TableError(ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_BAD_BAND, f"{self.name}: meter {mid}'s bands")
        m = ofmsg.parse_meter(SimpleNamespace(meter_id=mid, flags=flags, bands=bands))
        self.tables.add_meter(m, modify=command == ofp.OFPMC_MODIFY)

    def _packet_out(self, msg: bytes) -> list[tuple[Output, bytes]]:
        buffer_id, in_port, alen = struct.unpack_from(ofp.OFP_PACKET_OUT_PACK_STR, msg, HEADER.size)
        acts = [ofmsg.parse_action(a) for a in _actions(msg, ofp.OFP_PACKET_OUT_SIZE, alen)]
        data = msg[ofp.OFP_PACKET_OUT_SIZE + alen:]
        if buffer_id != NO_BUFFER:
            raise TableError(ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BUFFER_UNKNOWN, f"{self.name}: buffer {buffer_id}")
        pkt = frame_fields(data)
        pkt["in_port"] = in_port
        out: list[Output] = []
        self.tables.actions(acts, pkt, out)
        return [(o, data) for o in out]

    def _role(self, xid: int, msg: bytes) -> list[bytes]:
        role, generation = struct.unpack_from(ofp.OFP_ROLE_REQUEST_PACK_STR, msg, HEADER.size)
        if role in (ofp.OFPCR_ROLE_MASTER, ofp.OFPCR_ROLE_SLAVE):
            if self.generation is not None and ((generation - self.generation) & (1 << 63)):
                return self._error(xid, ofp.OFPET_ROLE_REQUEST_FAILED, ofp.OFPRRFC_STALE, msg, "stale generation")
            self.generation = generation
        if role != ofp.OFPCR_ROLE_NOCHANGE:
            self.role = role
        return [_header(ofp.OFPT_ROLE_REPLY, xid, struct.pack(ofp.OFP_ROLE_REQUEST_PACK_STR, self.role,
                                                               self.generation or 0))]

    def _multipart(self, xid: int, msg: bytes) -> list[bytes]:
        mp_type, _flags = struct.unpack_from(ofp.OFP_MULTIPART_REQUEST_PACK_STR, msg, HEADER.size)
        t = self.tables
        if mp_type == ofp.OFPMP_FLOW:
            table_id, out_port, out_group, cookie, mask = struct.unpack_from("!B3xII4xQQ", msg, 16)
            items = [flow_stats(f) for f in t.flows() if (table_id == 0xFF or f.table_id == table_id)
                     and f.cookie & mask == cookie & mask and (out_port == OFPP_ANY or it.Output(out_port) in f.actions)
                     and (out_group == OFPG_ANY or it.ToGroup(out_group) in f.actions)]
        elif mp_type == ofp.OFPMP_GROUP_DESC:
            items = [group_desc(g, t.watch.get(gid, ())) for gid, g in sorted(t.groups.items())]
        elif mp_type == ofp.OFPMP_METER_CONFIG:
            (mid,) = struct.unpack_from("!I", msg, 16)
            items = [meter_config(m) for m_id, m in sorted(t.meters.items()) if mid in (m_id, ofp.OFPM_ALL)]
        elif mp_type == ofp.OFPMP_PORT_DESC:
            items = [port_desc(p) for _, p in sorted(self.ports.items())]
        elif mp_type == ofp.OFPMP_DESC:
            items = [struct.pack(ofp.OFP_DESC_PACK_STR, b"Freeway", b"simswitch", b"1", self.name.encode()[:31],
                                 self.name.encode()[:255])]
        else:
            return self._error(xid, ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_BAD_MULTIPART, msg, f"multipart {mp_type}")
        return multipart_reply(xid, mp_type, items)


def multipart_reply(xid: int, mp_type: int, items: list[bytes]) -> list[bytes]:
    """A multipart reply cut into messages (OFPMPF_REPLY_MORE on all but the last)."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for item in items:
        if chunks[-1] and size + len(item) > MULTIPART_CHUNK:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += len(item)
    out = []
    for n, chunk in enumerate(chunks):
        more = ofp.OFPMPF_REPLY_MORE if n < len(chunks) - 1 else 0
        out.append(_header(ofp.OFPT_MULTIPART_REPLY, xid,
                           struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, mp_type, more) + b"".join(chunk)))
    return out


def frame_fields(data: bytes) -> dict:
    """The match fields of an Ethernet frame (what a switch matches a packet-out's data on)."""
    out: dict = {}
    if len(data) < 14:
        return out
    out["eth_dst"] = ":".join(f"{b:02x}" for b in data[0:6])
    out["eth_src"] = ":".join(f"{b:02x}" for b in data[6:12])
    (etype,) = struct.unpack_from("!H", data, 12)
    out["eth_type"] = etype
    off = 14
    if etype == 0x0806 and len(data) >= off + 28:
        op, = struct.unpack_from("!H", data, off + 6)
        out.update(arp_op=op, arp_spa=_ipv4(data, off + 14), arp_tpa=_ipv4(data, off + 24))
    elif etype == 0x0800 and len(data) >= off + 20:
        ihl = (data[off] & 0x0F) * 4
        out.update(ip_dscp=data[off + 1] >> 2, ip_proto=data[off + 9], ipv4_src=_ipv4(data, off + 12),
                   ipv4_dst=_ipv4(data, off + 16))
        l4 = off + ihl
        if out["ip_proto"] in (6, 17) and len(data) >= l4 + 4:
            sport, dport = struct.unpack_from("!HH", data, l4)
            names = ("tcp_src", "tcp_dst") if out["ip_proto"] == 6 else ("udp_src", "udp_dst")
            out.update({names[0]: sport, names[1]: dport})
            if out["ip_proto"] == 6 and len(data) >= l4 + 14:
                out["tcp_flags"] = ((data[l4 + 12] & 0x0F) << 8) | data[l4 + 13]
    return out


def _ipv4(data: bytes, off: int) -> str:
    return ".".join(str(b) for b in data[off:off + 4])


def udp_payload(data: bytes) -> bytes | None:
    """A frame's UDP payload (None if it is not IPv4 UDP)."""
    f = frame_fields(data)
    if f.get("ip_proto") != 17:
        return None
    ihl = (data[14] & 0x0F) * 4
    return data[14 + ihl + 8:]
