// Match fields, actions, table entries, groups, meters, the packet fields a switch reads, the 5-tuple hash and the ingress tag.
//
// Part of fwsim.cc (Freeway's packet-level engine on ns-3); see that file for the whole.

#pragma once

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace fw
{
using namespace ns3;

// ----- match fields and actions (compile.py uses the same numbers) ---------------------------------
enum Field : uint8_t
{
    F_IN_PORT = 1,
    F_ETH_TYPE = 2,
    F_ETH_SRC = 3,
    F_ETH_DST = 4,
    F_IP_PROTO = 5,
    F_IPV4_SRC = 6,
    F_IPV4_DST = 7,
    F_TCP_SRC = 8,
    F_TCP_DST = 9,
    F_UDP_SRC = 10,
    F_UDP_DST = 11,
    F_IP_DSCP = 12,
    F_NEVER = 13, // a field an IP packet never carries here (ARP, LLDP): the entry never matches
    F_TCP_FLAGS = 14,
};

enum Op : uint8_t
{
    A_OUTPUT = 1,
    A_GROUP = 2,
    A_CONTROLLER = 3,
    A_SET_DSCP = 4,
    A_SET_QUEUE = 5,
};

enum GroupType : uint8_t
{
    G_ALL = 0,
    G_SELECT = 1,
    G_INDIRECT = 2,
    G_FF = 3,
};

static const uint32_t ANY_PORT = 0xFFFFFFFF;

struct MatchField
{
    uint8_t field;
    uint64_t value;
    uint64_t mask;
};

struct Action
{
    uint8_t op;
    uint32_t arg;
};

struct Entry
{
    uint64_t id = 0;
    uint8_t table = 0;
    uint16_t priority = 0;
    uint64_t cookie = 0;
    uint32_t idleTimeout = 0;
    uint16_t flags = 0;
    uint32_t meter = 0;
    int gotoTable = -1;
    std::vector<MatchField> match;
    std::vector<Action> actions;
    double lastHit = 0;
    uint64_t packets = 0;
    uint64_t bytes = 0;
};

struct Bucket
{
    uint32_t weight = 1;
    uint32_t watch = ANY_PORT;
    std::vector<Action> actions;
};

struct Group
{
    uint8_t type = G_SELECT;
    std::vector<Bucket> buckets;
};

struct Meter
{
    double rate = 0;  // bit/s (or packets/s)
    double burst = 0; // bits (or packets)
    bool pktps = false;
    double tokens = 0;
    double last = 0;
    uint64_t drops = 0;
};

// What the tables see of a packet.
struct Fields
{
    uint32_t inPort = 0;
    uint64_t ethSrc = 0;
    uint8_t proto = 0;
    uint32_t src = 0;
    uint32_t dst = 0;
    uint16_t sport = 0;
    uint16_t dport = 0;
    uint8_t dscp = 0;
    uint16_t tcpFlags = 0; // OpenFlow's tcp_flags: the TCP header's flag bits (FIN 0x001)
    bool l4 = false;
};

struct Out
{
    uint32_t port;
    uint8_t dscp;
};

struct Sample
{
    double time;
    uint32_t inPort;
    uint32_t outPort;
    uint32_t src, dst;
    uint8_t proto;
    uint16_t sport, dport;
    uint8_t dscp;
    uint32_t ipLength;
    uint32_t tcpSeq;
    uint32_t tcpPayload;
};

struct Punt
{
    uint64_t id;
    uint32_t inPort;
    Ptr<Packet> packet; // with its IPv4 header
    Ipv4Header header;
};

inline uint32_t
Fnv1a(const uint8_t* data, size_t n, uint32_t h = 2166136261u)
{
    for (size_t i = 0; i < n; i++)
    {
        h ^= data[i];
        h *= 16777619u;
    }
    return h;
}

// The select-group hash: FNV-1a over the switch's salt (4 bytes) then src, dst (4 each), proto (1),
// sport, dport (2 each), all big-endian, then MurmurHash3's finalizer (FNV-1a's low bits follow the
// bytes' low bits alone). ryu_apps/simswitch/tables.py computes the same.
inline uint32_t
FlowHash(uint32_t salt, const Fields& f)
{
    uint8_t b[17];
    auto put32 = [&](int at, uint32_t v) {
        b[at] = v >> 24;
        b[at + 1] = v >> 16;
        b[at + 2] = v >> 8;
        b[at + 3] = v;
    };
    put32(0, salt);
    put32(4, f.src);
    put32(8, f.dst);
    b[12] = f.proto;
    b[13] = f.sport >> 8;
    b[14] = f.sport;
    b[15] = f.dport >> 8;
    b[16] = f.dport;
    uint32_t h = Fnv1a(b, 17);
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

// ----- port disciplines of our own (issue 39): cut-in queueing, ECN marks, per-priority pause ---------
// Which switch, and which of its ports, a packet entered by: the switch counts the bytes each ingress port
// holds in its egress queues (per-priority pause judges them), the queue uncounts them as they leave.
class IngressTag : public Tag
{
  public:
    uint32_t node = 0;
    uint32_t port = 0;

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("fw::IngressTag").SetParent<Tag>().SetGroupName("Network").AddConstructor<IngressTag>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    uint32_t GetSerializedSize() const override
    {
        return 8;
    }

    void Serialize(TagBuffer b) const override
    {
        b.WriteU32(node);
        b.WriteU32(port);
    }

    void Deserialize(TagBuffer b) override
    {
        node = b.ReadU32();
        port = b.ReadU32();
    }

    void Print(std::ostream& os) const override
    {
        os << "ingress=" << node << ":" << port;
    }
};

} // namespace fw
