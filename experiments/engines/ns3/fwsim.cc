// Freeway's packet-level engine on ns-3: the switches carry out the controller's OpenFlow program.
//
// Compiled at run time by cppyy (experiments/engines/ns3/native.py). Python parses every OpenFlow message a
// policy sends with the message-level simulated switch (ryu_apps/simswitch) and hands each change of a
// switch's tables to this code as one line of text (experiments/engines/ns3/compile.py); no Python runs per
// packet. What lives here:
//
//   Switch        one OpenFlow switch as an ns-3 Ipv4RoutingProtocol: flow tables (priority order,
//                 goto-table), select/all/indirect/ff groups (a live bucket: its watch port up; a
//                 select group hashes the 5-tuple with the switch's salt, FNV-1a, as the simulated
//                 switch does), drop meters (token buckets), set_field ip_dscp, set_queue, output,
//                 packets to the controller (held until Python answers), per-entry counters and idle
//                 timeouts, per-port counters, sFlow-like 1-in-N samples; per-packet load balancing to
//                 the least-loaded bucket (PerPktLB) as an engine option for select groups.
//   DscpFilter    the two strict-priority bands of a port, classified by DSCP as the emulator's tc
//                 filters classify (mice DSCP: band 0, elephant DSCP: band 1, anything else: band 0).
//   Host          a host's flows: request/response mice (8-byte size request, the answer, timed at the
//                 client as experiments/hosts/rr.py times them), bulk elephants counted at the receiver,
//                 the Freeway handshake over UDP before a flow that announces itself.
//
// Units: times in seconds (double), rates in bit/s, sizes in bytes.

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

class PortQueue;

// What a switch (or host) does when one of its queues lets a counted packet go.
class PauseSource
{
  public:
    virtual ~PauseSource() = default;
    virtual void Left(uint32_t port, uint32_t bytes) = 0;
};

// One port's queue: one or two bands over the port's buffer.
//  - strict: band 0 (mice) always first; each band its own byte limit (the emulator's 60/40 frames).
//  - cq (cut-in, Liu et al., ICPP 2021): one shared buffer. The judging function: a packet is short if
//    it carries the mice DSCP, long if the elephant DSCP, else short while its flow has sent fewer than
//    ``shortBytes`` through this port. The pulling function: short packets leave first (they cut in
//    ahead of the long backlog). A short packet finding the buffer full evicts long packets from the
//    head of their queue (the oldest: the packets nearest to leaving are the ones whose room is needed
//    now) into the back-off queue, outside the shared buffer (``backoffLimit`` bytes of it); they leave
//    once no short packet waits, before the long packets behind them (so a flow's order holds). An
//    evicted packet that finds the back-off queue full is dropped (its sender learns of the loss a
//    queue's time sooner than from a tail drop). Long
//    packets may fill only what the short ones' recent peak leaves (``headroom``), and that headroom
//    decays with ``decay`` seconds once short packets stop: long flows use the whole buffer while
//    short ones are OFF and give it up while they are ON.
//  - ECN: a packet enqueued into a band holding more than ``ecnK`` bytes is marked CE (if ECT; else
//    left alone), DCTCP's step marking.
//  - pause: a band that is paused (its downstream's per-priority pause) sends nothing until resumed.
class PortQueue : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("fw::PortQueue").SetParent<QueueDisc>().SetGroupName("TrafficControl")
                                .AddConstructor<PortQueue>();
        return tid;
    }

    PortQueue()
        : QueueDisc(QueueDiscSizePolicy::NO_LIMITS)
    {
    }

    // knobs (set through methods: cppyy's Ptr forwards calls)
    void Configure(uint32_t bands_, bool cutIn_, uint32_t limit0, uint32_t limit1, uint8_t miceDscp_,
                   uint8_t elephantDscp_)
    {
        bands = bands_;
        cutIn = cutIn_;
        limit[0] = limit0;
        limit[1] = limit1;
        miceDscp = miceDscp_;
        elephantDscp = elephantDscp_;
    }

    void SetEcn(uint32_t k0, uint32_t k1)
    {
        ecnK[0] = k0;
        ecnK[1] = k1;
    }

    void SetCutIn(uint32_t shortBytes_, double decay_, uint32_t backoff_ = 0)
    {
        shortBytes = shortBytes_;
        decay = decay_;
        backoffLimit = backoff_;
    }

    // ``shared``: the two bands by DSCP only (no flow is short by its bytes), one buffer, strict priority,
    // and a mouse arriving at a full buffer pushes the last elephant packet out (no headroom, no back-off)
    void SetShared()
    {
        cutIn = true;
        byBytes = false;
        decay = 1e-12;
        backoffLimit = 0;
    }

    void Counter(PauseSource* owner_, uint32_t node_)
    {
        owner = owner_;
        node = node_;
    }

    void SetPaused(uint32_t band, bool p)
    {
        double now = Simulator::Now().GetSeconds();
        if (p && !paused[band])
        {
            pausedSince[band] = now;
            pauses[band]++;
        }
        if (!p && paused[band])
        {
            pausedTime[band] += now - pausedSince[band];
        }
        paused[band] = p;
        if (!p && GetNetDeviceQueueInterface())
        {
            Run(); // resumed: what waited goes now (a queue on a device; a test's bare queue has none)
        }
    }

    bool IsPaused(uint32_t band) const
    {
        return paused[band];
    }

    double PausedTime(uint32_t band) const
    {
        return pausedTime[band] + (paused[band] ? Simulator::Now().GetSeconds() - pausedSince[band] : 0.0);
    }

    // The time-averaged backlog since the start (bytes), and the packets that went through.
    double AverageBytes()
    {
        Account();
        double now = Simulator::Now().GetSeconds();
        return now > 0 ? m_area / now : 0.0;
    }

    uint64_t sent[2] = {0, 0};

    // what happened here
    uint64_t drops[2] = {0, 0};
    uint64_t marks[2] = {0, 0};
    uint64_t evictions = 0; // long packets evicted and dropped (the back-off queue full)
    uint64_t backedOff = 0; // long packets evicted into the back-off queue
    uint32_t backoffPeak = 0; // the most bytes the back-off queue held
    uint64_t cutIns = 0; // short packets sent while long ones were waiting
    uint64_t ect = 0; // packets that arrived ECN-capable (ECT or CE): marks are possible only on these
    uint64_t blocked = 0; // packets that arrived at a paused band (head-of-line blocking by pause)
    uint64_t pauses[2] = {0, 0};
    uint32_t peak = 0;

    uint32_t bands = 1;
    bool cutIn = false;
    bool byBytes = true; // cq: an unmarked flow is long once it sent shortBytes (shared: by DSCP only)
    uint32_t limit[2] = {0, 0};
    uint32_t ecnK[2] = {0, 0};
    uint8_t miceDscp = 46;
    uint8_t elephantDscp = 8;
    uint32_t shortBytes = 100000;
    uint32_t backoffLimit = 0; // bytes the back-off queue holds (cq); 0: an evicted packet is dropped
    std::deque<Ptr<QueueDiscItem>> m_backoff;
    uint32_t m_backoffBytes = 0;
    double decay = 0.001;

  private:
    uint32_t Band(Ptr<QueueDiscItem> item)
    {
        if (bands < 2)
        {
            return 0;
        }
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (!ip)
        {
            return 0;
        }
        uint8_t d = ip->GetHeader().GetDscp();
        if (d == elephantDscp)
        {
            return 1;
        }
        if (d == miceDscp || !cutIn || !byBytes)
        {
            return 0;
        }
        uint64_t key = (uint64_t(ip->GetHeader().GetSource().Get()) << 32) ^ ip->GetHeader().GetDestination().Get()
                       ^ (uint64_t(ip->Hash(0)) << 16);
        double now = Simulator::Now().GetSeconds();
        auto& f = m_flowBytes[key];
        if (now - f.second > 1.0)
        {
            f.first = 0; // a flow silent for a second starts over (the table stays small)
        }
        f.first += item->GetSize();
        f.second = now;
        if (m_flowBytes.size() > 65536)
        {
            m_flowBytes.clear();
        }
        return f.first > shortBytes ? 1 : 0;
    }

    double Headroom(double now)
    {
        m_headroom *= std::exp(-(now - m_headroomAt) / decay);
        m_headroomAt = now;
        return m_headroom;
    }

    // the two bands are internal queues, so that the queue disc's own counters follow every packet
    uint32_t Bytes(uint32_t b)
    {
        return b < GetNInternalQueues() ? GetInternalQueue(b)->GetNBytes() : 0;
    }

    bool Empty(uint32_t b)
    {
        return b >= GetNInternalQueues() || GetInternalQueue(b)->IsEmpty();
    }

    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        if (GetNPacketFilters())
        {
            Classify(item); // a host's marker (HostMarker) sets the DSCP the band is judged by
        }
        Ptr<Ipv4QueueDiscItem> ipItem = DynamicCast<Ipv4QueueDiscItem>(item);
        if (ipItem && ipItem->GetHeader().GetEcn() != Ipv4Header::ECN_NotECT)
        {
            ect++;
        }
        uint32_t band = Band(item);
        uint32_t size = item->GetSize();
        double now = Simulator::Now().GetSeconds();
        if (paused[band])
        {
            blocked++;
        }
        if (cutIn)
        {
            uint32_t buffer = limit[0];
            if (band == 0)
            {
                while (Bytes(0) + Bytes(1) + size > buffer && !Empty(1))
                {
                    Account();
                    Ptr<QueueDiscItem> old = GetInternalQueue(1)->Dequeue();
                    if (m_backoffBytes + old->GetSize() <= backoffLimit)
                    {
                        m_backoff.push_back(old); // still waiting: still counted for pause
                        m_backoffBytes += old->GetSize();
                        backedOff++;
                        backoffPeak = std::max(backoffPeak, m_backoffBytes);
                        continue;
                    }
                    evictions++;
                    Uncount(old);
                    DropAfterDequeue(old, "evicted");
                }
                if (Bytes(0) + Bytes(1) + size > buffer)
                {
                    return Drop(item, band);
                }
                m_headroom = std::max(Headroom(now), double(Bytes(0) + size));
            }
            else if (Bytes(0) + Bytes(1) + size + Headroom(now) > buffer)
            {
                return Drop(item, band);
            }
        }
        else if (Bytes(band) + size > limit[band])
        {
            return Drop(item, band);
        }
        if (ecnK[band] && Bytes(band) > ecnK[band] && Mark(item, "ecn"))
        {
            marks[band]++;
        }
        Account();
        GetInternalQueue(band)->Enqueue(item);
        peak = std::max(peak, Bytes(0) + Bytes(1));
        return true;
    }

    void Account()
    {
        double now = Simulator::Now().GetSeconds();
        m_area += (Bytes(0) + Bytes(1)) * (now - m_changed);
        m_changed = now;
    }

    bool Drop(Ptr<QueueDiscItem> item, uint32_t band)
    {
        drops[band]++;
        Uncount(item);
        DropBeforeEnqueue(item, "full");
        return false;
    }

    void Uncount(Ptr<QueueDiscItem> item)
    {
        if (!owner)
        {
            return;
        }
        IngressTag tag;
        if (item->GetPacket()->PeekPacketTag(tag) && tag.node == node)
        {
            owner->Left(tag.port, item->GetSize());
        }
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        for (uint32_t b = 0; b < bands; b++)
        {
            if (paused[b])
            {
                continue;
            }
            if (b == 1 && !m_backoff.empty()) // the pulling function: evicted long packets first (the oldest)
            {
                Ptr<QueueDiscItem> item = m_backoff.front();
                m_backoff.pop_front();
                m_backoffBytes -= item->GetSize();
                sent[1]++;
                Uncount(item);
                return item;
            }
            if (Empty(b))
            {
                continue;
            }
            Account();
            Ptr<QueueDiscItem> item = GetInternalQueue(b)->Dequeue();
            sent[b]++;
            if (b == 0 && !Empty(1))
            {
                cutIns++;
            }
            Uncount(item);
            return item;
        }
        return nullptr;
    }

    bool CheckConfig() override
    {
        if (GetNInternalQueues() == 0)
        {
            for (int b = 0; b < 2; b++)
            {
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize", QueueSizeValue(QueueSize("1000000p"))));
            }
        }
        return limit[0] > 0;
    }

    void InitializeParams() override
    {
    }

    bool paused[2] = {false, false};
    double pausedSince[2] = {0, 0};
    double pausedTime[2] = {0, 0};
    double m_headroom = 0;
    double m_headroomAt = 0;
    double m_area = 0;
    double m_changed = 0;
    std::unordered_map<uint64_t, std::pair<uint64_t, double>> m_flowBytes;
    PauseSource* owner = nullptr;
    uint32_t node = 0;
};

inline Ptr<PortQueue>
InstallPortQueue(Ptr<NetDevice> dev)
{
    Ptr<PortQueue> q = CreateObject<PortQueue>();
    Ptr<TrafficControlLayer> tc = dev->GetNode()->GetObject<TrafficControlLayer>();
    tc->SetRootQueueDiscOnDevice(dev, q);
    return q;
}

class Switch : public Ipv4RoutingProtocol, public PauseSource
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("fw::Switch")
                                .SetParent<Ipv4RoutingProtocol>()
                                .SetGroupName("Internet")
                                .AddConstructor<Switch>();
        return tid;
    }

    // ----- set up by the engine --------------------------------------------------------------------
    uint32_t salt = 0;
    uint32_t sampling = 0; // 1-in-N flow samples (0: none)
    bool perPacket = false; // select groups: the live bucket whose port has the least backlog
    std::map<uint32_t, uint32_t> portOfIf; // ns-3 interface -> OpenFlow port
    std::map<uint32_t, uint32_t> ifOfPort; // OpenFlow port -> ns-3 interface
    std::map<uint32_t, uint64_t> peerMac;  // OpenFlow port -> the MAC a frame arriving there carries
    std::set<uint32_t> down;               // ports that are down

    // (set through methods: cppyy's Ptr<Switch> forwards calls, not assignments to members)
    void Configure(uint32_t saltValue, uint32_t samplingN, bool perPacketLb, uint32_t seed)
    {
        salt = saltValue;
        sampling = samplingN;
        perPacket = perPacketLb;
        m_rng.seed(seed);
        m_tieRng.seed(seed ^ (saltValue * 2654435761u));
        NextSkip();
    }

    uint64_t PeerMac(uint32_t port) const
    {
        auto it = peerMac.find(port);
        return it == peerMac.end() ? 0 : it->second;
    }

    void SetPortDown(uint32_t port, bool isDown)
    {
        if (isDown)
        {
            down.insert(port);
        }
        else
        {
            down.erase(port);
        }
    }

    void MapPort(uint32_t iface, uint32_t port, uint64_t mac)
    {
        portOfIf[iface] = port;
        ifOfPort[port] = iface;
        peerMac[port] = mac;
    }

    // ----- the program, one change per line (compile.py) -------------------------------------------
    // E id table priority cookie idle flags meter goto nmatch (field value mask)* nact (op arg)*
    // G gid type nbuckets (weight watch nact (op arg)*)*      M mid rate burst pktps
    // DE id      DG gid      DM mid
    std::string Apply(const std::string& text)
    {
        std::istringstream in(text);
        std::string kind;
        std::ostringstream err;
        while (in >> kind)
        {
            if (kind == "E")
            {
                Entry e;
                uint32_t table, prio, idle, flags, nm, na;
                int go;
                in >> e.id >> table >> prio >> e.cookie >> idle >> flags >> e.meter >> go >> nm;
                e.table = table;
                e.priority = prio;
                e.idleTimeout = idle;
                e.flags = flags;
                e.gotoTable = go;
                for (uint32_t i = 0; i < nm; i++)
                {
                    uint32_t f;
                    MatchField m;
                    in >> f >> m.value >> m.mask;
                    m.field = f;
                    e.match.push_back(m);
                }
                in >> na;
                ReadActions(in, na, e.actions);
                e.lastHit = Simulator::Now().GetSeconds();
                AddEntry(e);
            }
            else if (kind == "DE")
            {
                uint64_t id;
                in >> id;
                RemoveEntry(id);
            }
            else if (kind == "G")
            {
                uint32_t gid, type, nb;
                in >> gid >> type >> nb;
                Group g;
                g.type = type;
                for (uint32_t i = 0; i < nb; i++)
                {
                    Bucket b;
                    uint32_t na;
                    in >> b.weight >> b.watch >> na;
                    ReadActions(in, na, b.actions);
                    g.buckets.push_back(b);
                }
                m_groups[gid] = g;
            }
            else if (kind == "DG")
            {
                uint32_t gid;
                in >> gid;
                m_groups.erase(gid);
            }
            else if (kind == "M")
            {
                uint32_t mid, pktps;
                double rate, burst;
                in >> mid >> rate >> burst >> pktps;
                Meter& m = m_meters[mid];
                m.pktps = pktps;
                m.rate = pktps ? rate : rate * 1000.0;    // kbit/s -> bit/s
                m.burst = pktps ? burst : burst * 1000.0; // kbit -> bit
                m.tokens = m.burst;
                m.last = Simulator::Now().GetSeconds();
            }
            else if (kind == "DM")
            {
                uint32_t mid;
                in >> mid;
                m_meters.erase(mid);
            }
            else
            {
                err << "unknown change " << kind << "; ";
                break;
            }
            if (in.fail())
            {
                err << "malformed " << kind << "; ";
                break;
            }
        }
        return err.str();
    }

    // ----- what the engine reads -------------------------------------------------------------------
    std::vector<Sample> TakeSamples()
    {
        std::vector<Sample> out;
        out.swap(m_samples);
        return out;
    }

    std::vector<Punt> TakePunts()
    {
        std::vector<Punt> out;
        out.swap(m_punts);
        return out;
    }

    // Entries idle past their timeout: removed here; "id cookie flags" per line.
    std::string Expire(double now)
    {
        std::ostringstream out;
        for (auto& t : m_tables)
        {
            auto& v = t.second;
            for (auto it = v.begin(); it != v.end();)
            {
                if (it->idleTimeout && now - it->lastHit >= it->idleTimeout)
                {
                    out << it->id << " " << it->cookie << " " << it->flags << "\n";
                    m_where.erase(it->id);
                    it = v.erase(it);
                }
                else
                {
                    ++it;
                }
            }
        }
        return out.str();
    }

    // "id packets bytes" of every entry.
    std::string EntryCounters() const
    {
        std::ostringstream out;
        for (auto& t : m_tables)
        {
            for (auto& e : t.second)
            {
                out << e.id << " " << e.packets << " " << e.bytes << "\n";
            }
        }
        return out.str();
    }

    uint64_t rxBytes(uint32_t port) const
    {
        auto it = m_rxBytes.find(port);
        return it == m_rxBytes.end() ? 0 : it->second;
    }

    uint64_t txBytes(uint32_t port) const
    {
        auto it = m_txBytes.find(port);
        return it == m_txBytes.end() ? 0 : it->second;
    }

    // ----- per-priority pause of the mice band (PFC), judged at this switch's ingress ports -----------
    // ``everything``: the ports have one band, so pause judges all traffic (not only the mice band)
    void SetPfc(uint32_t xoffBytes, uint32_t xonBytes, uint8_t elephantDscp_, bool everything)
    {
        pfc = true;
        pfcAll = everything;
        xoff = xoffBytes;
        xon = xonBytes;
        elephantDscp = elephantDscp_;
    }

    bool pfcAll = false;

    // The queue at the other end of a port's link (the one this switch pauses), and the link's delay.
    void Upstream(uint32_t port, Ptr<PortQueue> q, double delay)
    {
        m_up[port] = q;
        m_upDelay[port] = delay;
    }

    void Left(uint32_t port, uint32_t bytes) override
    {
        auto& c = m_ingress[port];
        c = c > bytes ? c - bytes : 0;
        JudgePause(port);
    }

    uint32_t IngressBytes(uint32_t port) const
    {
        auto it = m_ingress.find(port);
        return it == m_ingress.end() ? 0 : it->second;
    }

    uint64_t pauseFrames = 0;  // PAUSE (XOFF) frames sent
    uint64_t resumeFrames = 0; // RESUME (XON) frames sent
    bool pfc = false;
    uint32_t xoff = 0;
    uint32_t xon = 0;
    uint8_t elephantDscp = 8;

    uint64_t tableDrops = 0;  // no entry matched, or an entry without an output
    uint64_t meterDrops = 0;
    uint64_t forwarded = 0;
    uint64_t puntsMade = 0;

    void CountTx(uint32_t port, uint32_t bytes)
    {
        m_txBytes[port] += bytes;
    }

    // A frame the controller sent out of a port (packet-out): the IPv4 datagram's bytes.
    bool Inject(uint32_t port, const std::string& ip)
    {
        auto it = ifOfPort.find(port);
        if (it == ifOfPort.end() || down.count(port))
        {
            return false;
        }
        Ptr<Packet> p = Create<Packet>(reinterpret_cast<const uint8_t*>(ip.data()), ip.size());
        if (!m_ucb.IsNull())
        {
            // into the port's queue, as a switch queues a packet-out: the device itself holds one
            // packet, so a busy link refused what went to it directly (a handshake's answer, lost)
            Ipv4Header h;
            p->RemoveHeader(h);
            Send(p, h, port, h.GetDscp());
            return true;
        }
        Ptr<NetDevice> dev = m_ipv4->GetNetDevice(it->second);
        return dev->Send(p, dev->GetBroadcast(), 0x0800);
    }

    // A held packet-in sent on by the controller (a packet-out of the same frame).
    bool Resume(uint64_t id, uint32_t port)
    {
        auto it = m_held.find(id);
        if (it == m_held.end())
        {
            return false;
        }
        Punt p = it->second;
        m_held.erase(it);
        Send(p.packet->Copy(), p.header, port, p.header.GetDscp());
        return true;
    }

    void Forget(uint64_t id)
    {
        m_held.erase(id);
    }

    // ----- Ipv4RoutingProtocol ---------------------------------------------------------------------
    Ptr<Ipv4Route> RouteOutput(Ptr<Packet>, const Ipv4Header&, Ptr<NetDevice>, Socket::SocketErrno& err) override
    {
        err = Socket::ERROR_NOROUTETOHOST; // a switch originates nothing
        return nullptr;
    }

    bool RouteInput(Ptr<const Packet> p,
                    const Ipv4Header& h,
                    Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override
    {
        m_ucb = ucb;
        uint32_t iface = m_ipv4->GetInterfaceForDevice(idev);
        auto pit = portOfIf.find(iface);
        if (pit == portOfIf.end())
        {
            return false;
        }
        Fields f;
        f.inPort = pit->second;
        f.ethSrc = peerMac[f.inPort];
        f.proto = h.GetProtocol();
        f.src = h.GetSource().Get();
        f.dst = h.GetDestination().Get();
        f.dscp = h.GetDscp();
        uint32_t tcpSeq = 0, tcpPayload = 0;
        uint32_t ipLen = p->GetSize() + h.GetSerializedSize();
        if (f.proto == 6)
        {
            TcpHeader t;
            if (p->PeekHeader(t))
            {
                f.sport = t.GetSourcePort();
                f.dport = t.GetDestinationPort();
                f.l4 = true;
                tcpSeq = t.GetSequenceNumber().GetValue();
                tcpPayload = p->GetSize() - t.GetSerializedSize();
            }
        }
        else if (f.proto == 17)
        {
            UdpHeader u;
            if (p->PeekHeader(u))
            {
                f.sport = u.GetSourcePort();
                f.dport = u.GetDestinationPort();
                f.l4 = true;
            }
        }
        m_rxBytes[f.inPort] += ipLen + 14;
        m_outs.clear();
        m_toController = false;
        m_meterDrop = false;
        double now = Simulator::Now().GetSeconds();
        Process(f, ipLen + 14, now);
        if (sampling && --m_skip == 0)
        {
            NextSkip();
            m_samples.push_back(Sample{now, f.inPort, m_outs.empty() ? 0u : m_outs[0].port, f.src, f.dst,
                                       f.proto, f.sport, f.dport, f.dscp, ipLen, tcpSeq, tcpPayload});
        }
        if (m_meterDrop)
        {
            meterDrops++;
            return true; // consumed: dropped
        }
        if (m_toController)
        {
            Punt pu{++m_puntId, f.inPort, p->Copy(), h};
            m_held[pu.id] = pu;
            m_punts.push_back(pu);
            puntsMade++;
            Simulator::Stop(); // the controller answers before the simulation goes on
        }
        if (m_outs.empty() && !m_toController)
        {
            tableDrops++;
            return true;
        }
        for (auto& o : m_outs)
        {
            if (o.port == f.inPort)
            {
                continue; // OpenFlow: output to the input port is dropped (OFPP_IN_PORT is not used)
            }
            Ptr<Packet> c = p->Copy();
            if (pfc && (pfcAll || o.dscp != elephantDscp) && m_up.count(f.inPort))
            {
                IngressTag tag;
                tag.node = m_ipv4->GetObject<Node>()->GetId();
                tag.port = f.inPort;
                c->ReplacePacketTag(tag);
                m_ingress[f.inPort] += c->GetSize() + h.GetSerializedSize();
                JudgePause(f.inPort);
            }
            Send(c, h, o.port, o.dscp);
        }
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override {}
    void NotifyInterfaceDown(uint32_t) override {}
    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override {}
    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override {}

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override
    {
    }

  private:
    void JudgePause(uint32_t port)
    {
        auto up = m_up.find(port);
        if (up == m_up.end())
        {
            return;
        }
        uint32_t c = m_ingress[port];
        bool& sent = m_pausing[port];
        if (!sent && c > xoff)
        {
            sent = true;
            pauseFrames++;
            Simulator::Schedule(Seconds(m_upDelay[port]), &PortQueue::SetPaused, up->second, 0, true);
        }
        else if (sent && c <= xon)
        {
            sent = false;
            resumeFrames++;
            Simulator::Schedule(Seconds(m_upDelay[port]), &PortQueue::SetPaused, up->second, 0, false);
        }
    }

    std::map<uint32_t, uint32_t> m_ingress;
    std::map<uint32_t, Ptr<PortQueue>> m_up;
    std::map<uint32_t, double> m_upDelay;
    std::map<uint32_t, bool> m_pausing;

    static void ReadActions(std::istringstream& in, uint32_t n, std::vector<Action>& out)
    {
        for (uint32_t i = 0; i < n; i++)
        {
            uint32_t op, arg;
            in >> op >> arg;
            out.push_back(Action{static_cast<uint8_t>(op), arg});
        }
    }

    void AddEntry(const Entry& e)
    {
        RemoveEntry(e.id);
        auto& v = m_tables[e.table];
        // an entry with the same priority and match replaces the old one (the engine gives it the old id)
        auto pos = std::find_if(v.begin(), v.end(), [&](const Entry& x) { return x.priority < e.priority; });
        v.insert(pos, e);
        m_where[e.id] = e.table;
    }

    void RemoveEntry(uint64_t id)
    {
        auto w = m_where.find(id);
        if (w == m_where.end())
        {
            return;
        }
        auto& v = m_tables[w->second];
        v.erase(std::remove_if(v.begin(), v.end(), [&](const Entry& x) { return x.id == id; }), v.end());
        m_where.erase(w);
    }

    static bool Matches(const Entry& e, const Fields& f)
    {
        for (auto& m : e.match)
        {
            uint64_t have;
            switch (m.field)
            {
            case F_IN_PORT:
                have = f.inPort;
                break;
            case F_ETH_TYPE:
                have = 0x0800;
                break;
            case F_ETH_SRC:
                have = f.ethSrc;
                break;
            case F_IP_PROTO:
                have = f.proto;
                break;
            case F_IPV4_SRC:
                have = f.src;
                break;
            case F_IPV4_DST:
                have = f.dst;
                break;
            case F_TCP_SRC:
                if (f.proto != 6 || !f.l4)
                {
                    return false;
                }
                have = f.sport;
                break;
            case F_TCP_DST:
                if (f.proto != 6 || !f.l4)
                {
                    return false;
                }
                have = f.dport;
                break;
            case F_UDP_SRC:
                if (f.proto != 17 || !f.l4)
                {
                    return false;
                }
                have = f.sport;
                break;
            case F_UDP_DST:
                if (f.proto != 17 || !f.l4)
                {
                    return false;
                }
                have = f.dport;
                break;
            case F_IP_DSCP:
                have = f.dscp;
                break;
            default:
                return false;
            }
            if ((have & m.mask) != (m.value & m.mask))
            {
                return false;
            }
        }
        return true;
    }

    void Process(Fields& f, uint32_t frameBytes, double now)
    {
        uint32_t table = 0;
        for (int hops = 0; hops < 8; hops++)
        {
            auto t = m_tables.find(table);
            if (t == m_tables.end())
            {
                return;
            }
            Entry* hit = nullptr;
            for (auto& e : t->second)
            {
                if (Matches(e, f))
                {
                    hit = &e;
                    break;
                }
            }
            if (!hit)
            {
                return;
            }
            hit->packets++;
            hit->bytes += frameBytes;
            hit->lastHit = now;
            if (hit->meter && !MeterAllows(hit->meter, frameBytes, now))
            {
                m_meterDrop = true;
                return;
            }
            RunActions(hit->actions, f, now, 0);
            if (hit->gotoTable < 0)
            {
                return;
            }
            table = hit->gotoTable;
        }
    }

    bool MeterAllows(uint32_t mid, uint32_t bytes, double now)
    {
        auto it = m_meters.find(mid);
        if (it == m_meters.end())
        {
            return false; // an entry whose meter went: OpenFlow deletes it with the meter, so never here
        }
        Meter& m = it->second;
        m.tokens = std::min(m.burst, m.tokens + (now - m.last) * m.rate);
        m.last = now;
        double need = m.pktps ? 1.0 : bytes * 8.0;
        if (m.tokens < need)
        {
            m.drops++;
            return false;
        }
        m.tokens -= need;
        return true;
    }

    void RunActions(const std::vector<Action>& acts, Fields& f, double now, int depth)
    {
        for (auto& a : acts)
        {
            switch (a.op)
            {
            case A_OUTPUT:
                m_outs.push_back(Out{a.arg, f.dscp});
                break;
            case A_CONTROLLER:
                m_toController = true;
                break;
            case A_SET_DSCP:
                f.dscp = a.arg;
                break;
            case A_SET_QUEUE:
                break; // the port's bands follow the DSCP (DscpFilter), as the emulator's tc filters do
            case A_GROUP:
                if (depth < 4)
                {
                    RunGroup(a.arg, f, now, depth + 1);
                }
                break;
            }
        }
    }

    uint32_t OutPortOf(const Bucket& b) const
    {
        for (auto& a : b.actions)
        {
            if (a.op == A_OUTPUT)
            {
                return a.arg;
            }
        }
        return ANY_PORT;
    }

    uint32_t Backlog(uint32_t port) const
    {
        auto it = ifOfPort.find(port);
        if (it == ifOfPort.end())
        {
            return 0;
        }
        Ptr<NetDevice> dev = m_ipv4->GetNetDevice(it->second);
        Ptr<TrafficControlLayer> tc = m_ipv4->GetObject<Node>()->GetObject<TrafficControlLayer>();
        Ptr<QueueDisc> qd = tc ? tc->GetRootQueueDiscOnDevice(dev) : nullptr;
        return qd ? qd->GetNBytes() : 0;
    }

    void RunGroup(uint32_t gid, Fields& f, double now, int depth)
    {
        auto it = m_groups.find(gid);
        if (it == m_groups.end())
        {
            return;
        }
        Group& g = it->second;
        std::vector<Bucket*> live;
        for (auto& b : g.buckets)
        {
            if (g.type == G_ALL || g.type == G_INDIRECT || !down.count(b.watch))
            {
                live.push_back(&b);
            }
        }
        if (live.empty())
        {
            return;
        }
        if (g.type == G_ALL)
        {
            for (auto* b : live)
            {
                Fields copy = f;
                RunActions(b->actions, copy, now, depth);
            }
            return;
        }
        if (g.type == G_SELECT)
        {
            if (perPacket)
            {
                // the least backlog; ties (every port idle, most of the time) broken uniformly at random:
                // "the first" would send every switch's idle-time traffic to the same next hop, and the
                // same core, whose downlinks then drop what no uplink ever saw queued
                Bucket* best = nullptr;
                uint32_t least = 0;
                uint32_t ties = 0;
                for (auto* b : live)
                {
                    if (b->weight == 0)
                    {
                        continue;
                    }
                    uint32_t q = Backlog(OutPortOf(*b));
                    if (!best || q < least)
                    {
                        best = b;
                        least = q;
                        ties = 1;
                    }
                    else if (q == least && m_tieRng() % ++ties == 0)
                    {
                        best = b;
                    }
                }
                if (best)
                {
                    Fields copy = f;
                    RunActions(best->actions, copy, now, depth);
                    f.dscp = copy.dscp;
                }
                return;
            }
            uint64_t total = 0;
            for (auto* b : live)
            {
                total += b->weight;
            }
            if (total == 0)
            {
                return;
            }
            uint64_t pick = FlowHash(salt, f) % total;
            for (auto* b : live)
            {
                if (pick < b->weight)
                {
                    Fields copy = f;
                    RunActions(b->actions, copy, now, depth);
                    return;
                }
                pick -= b->weight;
            }
            return;
        }
        Fields copy = f; // indirect, fast failover: the first live bucket
        RunActions(live[0]->actions, copy, now, depth);
    }

    void Send(Ptr<Packet> p, const Ipv4Header& h, uint32_t port, uint8_t dscp)
    {
        auto it = ifOfPort.find(port);
        if (it == ifOfPort.end() || down.count(port))
        {
            tableDrops++;
            return;
        }
        uint32_t iface = it->second;
        Ptr<Ipv4Route> r = Create<Ipv4Route>();
        r->SetDestination(h.GetDestination());
        r->SetGateway(Ipv4Address("0.0.0.0"));
        r->SetSource(m_ipv4->GetAddress(iface, 0).GetLocal());
        r->SetOutputDevice(m_ipv4->GetNetDevice(iface));
        Ipv4Header out = h;
        out.SetDscp(static_cast<Ipv4Header::DscpType>(dscp));
        forwarded++;
        m_ucb(r, p, out);
    }

    void NextSkip()
    {
        if (sampling <= 1)
        {
            m_skip = 1;
            return;
        }
        std::uniform_int_distribution<uint32_t> d(1, 2 * sampling - 1); // mean N, as sFlow's random skip
        m_skip = d(m_rng);
    }

    Ptr<Ipv4> m_ipv4;
    UnicastForwardCallback m_ucb;
    std::map<uint32_t, std::vector<Entry>> m_tables;
    std::unordered_map<uint64_t, uint32_t> m_where;
    std::map<uint32_t, Group> m_groups;
    std::map<uint32_t, Meter> m_meters;
    std::vector<Out> m_outs;
    bool m_toController = false;
    bool m_meterDrop = false;
    std::map<uint32_t, uint64_t> m_rxBytes, m_txBytes;
    std::vector<Sample> m_samples;
    std::vector<Punt> m_punts;
    std::map<uint64_t, Punt> m_held;
    uint64_t m_puntId = 0;
    uint32_t m_skip = 1;
    std::mt19937 m_rng{1};
    std::mt19937 m_tieRng{1}; // PerPktLB's ties
};

// A switch's port queue counts, as packets leave, the bytes each ingress port brought (per-priority pause).
inline void
Attach(Ptr<PortQueue> q, Ptr<Switch> sw, uint32_t node)
{
    q->Counter(PeekPointer(sw), node);
}

// Counting what a switch port transmits (sFlow's ifOutOctets) from its device's trace.
inline void
TxTrace(Switch* sw, uint32_t port, Ptr<const Packet> p)
{
    sw->CountTx(port, p->GetSize() + 12); // PPP's 2 bytes out, Ethernet's 14 in: a frame's length
}

inline void
WatchTx(Ptr<Switch> sw, Ptr<NetDevice> dev, uint32_t port)
{
    dev->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&TxTrace, PeekPointer(sw), port));
}

// ----- a port's two bands, by DSCP -------------------------------------------------------------
class DscpFilter : public Ipv4PacketFilter
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("fw::DscpFilter")
                                .SetParent<Ipv4PacketFilter>()
                                .SetGroupName("TrafficControl")
                                .AddConstructor<DscpFilter>();
        return tid;
    }

    uint8_t elephantDscp = 8;

  private:
    int32_t DoClassify(Ptr<QueueDiscItem> item) const override
    {
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (!ip)
        {
            return 0;
        }
        return ip->GetHeader().GetDscp() == elephantDscp ? 1 : 0;
    }
};

inline void
AddDscpFilter(Ptr<QueueDisc> qd, uint8_t elephantDscp)
{
    Ptr<DscpFilter> f = CreateObject<DscpFilter>();
    f->elephantDscp = elephantDscp;
    qd->AddPacketFilter(f);
}

// A host marking its flows' DSCP at its own egress, by local TCP port, as a Linux host's tc or iptables
// DSCP rule does (the ECN bits left alone). Needed with ECN: ns-3 3.44's TCP sends every packet of a
// socket given an IP TOS of its own (Socket::SetIpTos) as Not-ECT, so no queue could mark it (measured:
// DCTCP with DSCP 8 through a fifo+ecn port, 0 ECN-capable packets of 4,000; with no TOS, all of them).
// As a filter it also gives the host's fq_codel its flow hash (fq_codel drops what no filter classifies).
class HostMarker : public Ipv4PacketFilter
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("fw::HostMarker")
                                .SetParent<Ipv4PacketFilter>()
                                .SetGroupName("TrafficControl")
                                .AddConstructor<HostMarker>();
        return tid;
    }

    std::map<uint16_t, uint8_t> dscpOf; // local TCP port -> DSCP

  private:
    int32_t DoClassify(Ptr<QueueDiscItem> item) const override
    {
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (ip && ip->GetHeader().GetProtocol() == 6 && !dscpOf.empty())
        {
            UdpHeader ports; // a TCP header starts with the same two ports
            item->GetPacket()->PeekHeader(ports);
            auto it = dscpOf.find(ports.GetSourcePort());
            if (it != dscpOf.end())
            {
                // the item's header is its own copy, written to the packet when it leaves the queue
                const_cast<Ipv4Header&>(ip->GetHeader()).SetDscp(static_cast<Ipv4Header::DscpType>(it->second));
            }
        }
        return static_cast<int32_t>(item->Hash(0) & 0x7FFFFFFF);
    }
};


// ----- hosts -----------------------------------------------------------------------------------
enum Kind : uint8_t
{
    K_RR = 0,   // request/response: the source asks the destination for ``size`` bytes (experiments/hosts/rr.py)
    K_BULK = 1, // the source sends ``size`` bytes (0: until ``stop``) to the destination's ``dport``
};

struct FlowSpec
{
    uint32_t id = 0;
    double start = 0;
    uint8_t kind = K_RR;
    uint32_t dst = 0;
    uint16_t dport = 0;
    uint16_t sport = 0; // 0: any
    uint64_t size = 0;  // bytes; a bulk flow of size 0 sends until ``stop``
    double stop = -1;   // a bulk sender stops sending then (< 0: when its bytes are sent)
    uint8_t tos = 0;    // the IP TOS the source's socket sets (a host marking its own priority)
    double rate = 0;    // bulk: the application's own rate in bit/s, as iperf3 -b paces (0: as fast as TCP goes)
    std::string announce; // the handshake's bytes ('' : not announced)
};

struct FlowResult
{
    uint32_t id = 0;
    double start = 0;
    double end = -1;       // request/response: the last byte at the client; bulk: when the sender stopped
    uint64_t bytes = 0;    // request/response: received by the client
    uint32_t rto = 0;      // retransmission timeouts of the connection at this end
    uint16_t sport = 0;    // the connection's source port
    int answer = -1;       // the handshake: -1 not announced, 0 no answer, 1 ACK, 2 NACK
    double answered = -1;  // when the answer came
    bool ok = false;
};

class Host : public Application
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("fw::Host").SetParent<Application>().SetGroupName("Applications").AddConstructor<Host>();
        return tid;
    }

    uint32_t serviceAddr = 0;
    uint16_t servicePort = 7070;
    uint16_t rrPort = 7100;
    double handshakeTimeout = 1.0; // freeway send's defaults: 1 s per try, 3 tries
    uint32_t handshakeTries = 3;
    std::vector<FlowSpec> flows;
    std::map<uint32_t, FlowResult> results;
    // bulk flows received here, by the sender's (address, port): bytes, and when the last of a sized
    // flow's bytes arrived (-1: not yet, or a flow without a size)
    std::map<std::pair<uint32_t, uint16_t>, uint64_t> sunk;
    std::map<std::pair<uint32_t, uint16_t>, double> sunkDone;
    std::map<uint64_t, uint32_t> serverRto; // (client address << 16 | client port) -> the rr server's RTOs
    std::vector<uint16_t> sinkPorts;

    void Configure(uint32_t service, uint16_t rr, uint8_t rrServerTos = 0)
    {
        serviceAddr = service;
        rrPort = rr;
        rrTos = rrServerTos;
    }

    uint8_t rrTos = 0; // the TOS of the request/response server's answers
    Ptr<HostMarker> marker; // ECN in use: DSCPs are set at the host's egress, not on the socket

    // (a method, not an assignment from Python: cppyy does not write a Ptr member through)
    void MarkAtEgress(Ptr<QueueDisc> egress)
    {
        marker = CreateObject<HostMarker>();
        egress->AddPacketFilter(marker);
        if (rrTos)
        {
            marker->dscpOf[rrPort] = rrTos >> 2; // the request/response server's answers
        }
    }

    void Add(const FlowSpec& f)
    {
        flows.push_back(f);
    }

    void AddSinkPort(uint16_t port)
    {
        sinkPorts.push_back(port);
    }

    bool Has(uint32_t id) const
    {
        return results.count(id) > 0;
    }

    FlowResult Result(uint32_t id) const
    {
        auto it = results.find(id);
        return it == results.end() ? FlowResult() : it->second;
    }

    uint64_t Sunk(uint32_t addr, uint16_t port) const
    {
        auto it = sunk.find({addr, port});
        return it == sunk.end() ? 0 : it->second;
    }

    double SunkDone(uint32_t addr, uint16_t port) const
    {
        auto it = sunkDone.find({addr, port});
        return it == sunkDone.end() ? -1.0 : it->second;
    }

    uint32_t ServerRto(uint32_t addr, uint16_t port) const
    {
        auto it = serverRto.find((uint64_t(addr) << 16) | port);
        return it == serverRto.end() ? 0 : it->second;
    }

  private:
    struct Mouse
    {
        uint32_t id;
        uint64_t want = 0;
        uint64_t got = 0;
        Ptr<Socket> sock;
    };

    struct SinkConn
    {
        uint8_t hdr[8];
        uint32_t have = 0;
        uint64_t size = 0;
    };

    struct ServerConn
    {
        uint8_t hdr[8];
        uint32_t have = 0;
        uint64_t left = 0;
        bool started = false;
    };

    void StartApplication() override
    {
        Ptr<Node> node = GetNode();
        // request/response server (experiments/hosts/rr.py's): 8-byte size in, that many bytes out
        m_rr = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
        m_rr->Bind(InetSocketAddress(Ipv4Address::GetAny(), rrPort));
        m_rr->Listen();
        m_rr->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                MakeCallback(&Host::RrAccept, this));
        for (uint16_t port : sinkPorts)
        {
            Ptr<Socket> s = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
            s->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
            s->Listen();
            s->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                 MakeCallback(&Host::SinkAccept, this));
            m_listen.push_back(s);
        }
        for (auto& f : flows)
        {
            FlowResult r;
            r.id = f.id;
            r.start = f.start;
            results[f.id] = r;
            Simulator::Schedule(Seconds(std::max(0.0, f.start - Simulator::Now().GetSeconds())), &Host::Begin,
                                this, f);
        }
    }

    void StopApplication() override
    {
    }

    // ----- the handshake -------------------------------------------------------------------------
    void Begin(FlowSpec f)
    {
        if (f.announce.empty())
        {
            Connect(f);
            return;
        }
        results[f.id].answer = 0;
        Ptr<Socket> u = Socket::CreateSocket(GetNode(), UdpSocketFactory::GetTypeId());
        u->Bind(InetSocketAddress(Ipv4Address::GetAny(), f.sport));
        u->SetRecvCallback(MakeCallback(&Host::Answer, this));
        m_udp[PeekPointer(u)] = f;
        Announce(u, f, 1);
    }

    void Announce(Ptr<Socket> u, FlowSpec f, uint32_t attempt)
    {
        if (results[f.id].answer != 0)
        {
            return; // answered meanwhile
        }
        if (attempt > handshakeTries)
        {
            u->Close();
            m_udp.erase(PeekPointer(u));
            Connect(f); // no answer: it still goes, unannounced
            return;
        }
        Ptr<Packet> p = Create<Packet>(reinterpret_cast<const uint8_t*>(f.announce.data()), f.announce.size());
        u->SendTo(p, 0, InetSocketAddress(Ipv4Address(serviceAddr), servicePort));
        Simulator::Schedule(Seconds(handshakeTimeout), &Host::Announce, this, u, f, attempt + 1);
    }

    void Answer(Ptr<Socket> u)
    {
        Address from;
        Ptr<Packet> p;
        while ((p = u->RecvFrom(from)))
        {
            auto it = m_udp.find(PeekPointer(u));
            if (it == m_udp.end() || p->GetSize() < 6)
            {
                continue;
            }
            uint8_t b[6];
            p->CopyData(b, 6);
            if (b[0] != 'F' || b[1] != 'W' || b[2] != 'H' || b[3] != 'S')
            {
                continue;
            }
            FlowSpec f = it->second;
            FlowResult& r = results[f.id];
            if (r.answer != 0)
            {
                continue;
            }
            r.answer = b[5] == 2 ? 1 : 2; // type 2: ACK, 3: NACK (ryu_apps/host/handshake.py)
            r.answered = Simulator::Now().GetSeconds();
            m_udp.erase(it);
            u->Close();
            Connect(f);
            return;
        }
    }

    // ----- connections ---------------------------------------------------------------------------
    void Connect(FlowSpec f)
    {
        Ptr<Socket> s = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        if (f.sport)
        {
            s->Bind(InetSocketAddress(Ipv4Address::GetAny(), f.sport));
        }
        else
        {
            s->Bind();
        }
        Address local;
        s->GetSockName(local);
        results[f.id].sport = InetSocketAddress::ConvertFrom(local).GetPort();
        if (f.tos && marker)
        {
            marker->dscpOf[results[f.id].sport] = f.tos >> 2; // at the host's egress (HostMarker)
        }
        else if (f.tos)
        {
            s->SetIpTos(f.tos);
        }
        s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&Host::CongState, this, f.id));
        m_flowOf[PeekPointer(s)] = f.id;
        if (f.kind == K_RR)
        {
            Mouse m;
            m.id = f.id;
            m.want = f.size;
            m.sock = s;
            m_mice[PeekPointer(s)] = m;
            s->SetConnectCallback(MakeCallback(&Host::MouseConnected, this), MakeCallback(&Host::Failed, this));
            s->SetRecvCallback(MakeCallback(&Host::MouseRecv, this));
            s->Connect(InetSocketAddress(Ipv4Address(f.dst), rrPort));
        }
        else
        {
            m_left[PeekPointer(s)] = 8 + (f.size ? f.size : (UINT64_MAX - 16));
            m_sizeOf[PeekPointer(s)] = f.size;
            if (f.rate > 0)
            {
                m_pace[PeekPointer(s)] = Pace{f.rate / 8.0, 0.0};
                Simulator::Schedule(MilliSeconds(1), &Host::Refill, this, s);
            }
            s->SetConnectCallback(MakeCallback(&Host::BulkConnected, this), MakeCallback(&Host::Failed, this));
            s->SetSendCallback(MakeCallback(&Host::BulkSend, this));
            s->Connect(InetSocketAddress(Ipv4Address(f.dst), f.dport));
            if (f.stop >= 0)
            {
                Simulator::Schedule(Seconds(std::max(0.0, f.stop - Simulator::Now().GetSeconds())),
                                    &Host::BulkStop, this, s);
            }
        }
        m_socks.push_back(s);
    }

    static void CongState(Host* h, uint32_t id, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t to)
    {
        if (to == TcpSocketState::CA_LOSS)
        {
            h->results[id].rto++;
        }
    }

    void Failed(Ptr<Socket> s)
    {
        m_mice.erase(PeekPointer(s));
    }

    void MouseConnected(Ptr<Socket> s)
    {
        auto it = m_mice.find(PeekPointer(s));
        if (it == m_mice.end())
        {
            return;
        }
        uint8_t req[8];
        uint64_t n = it->second.want;
        for (int i = 7; i >= 0; i--)
        {
            req[i] = n & 0xFF;
            n >>= 8;
        }
        s->Send(Create<Packet>(req, 8));
    }

    void MouseRecv(Ptr<Socket> s)
    {
        auto it = m_mice.find(PeekPointer(s));
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            if (it == m_mice.end())
            {
                continue;
            }
            it->second.got += p->GetSize();
        }
        if (it != m_mice.end() && it->second.got >= it->second.want)
        {
            FlowResult& r = results[it->second.id];
            r.end = Simulator::Now().GetSeconds();
            r.bytes = it->second.got;
            r.ok = true;
            m_mice.erase(it);
            Finished(s);
        }
    }

    // A paced sender (iperf3 -b): every millisecond, a millisecond's bytes more may be written
    void Refill(Ptr<Socket> s)
    {
        auto p = m_pace.find(PeekPointer(s));
        if (p == m_pace.end() || !m_left.count(PeekPointer(s)))
        {
            return;
        }
        p->second.credit = std::min(p->second.credit + p->second.bytesPerS * 1e-3,
                                    p->second.bytesPerS * 1e-3 + 65536.0);
        BulkSend(s, s->GetTxAvailable());
        Simulator::Schedule(MilliSeconds(1), &Host::Refill, this, s);
    }

    void BulkConnected(Ptr<Socket> s)
    {
        BulkSend(s, s->GetTxAvailable());
    }

    void BulkStop(Ptr<Socket> s)
    {
        auto it = m_left.find(PeekPointer(s));
        if (it == m_left.end())
        {
            return;
        }
        uint32_t id = m_flowOf[PeekPointer(s)];
        results[id].end = Simulator::Now().GetSeconds();
        results[id].ok = true;
        m_left.erase(it);
        Finished(s);
    }

    void BulkSend(Ptr<Socket> s, uint32_t)
    {
        auto it = m_left.find(PeekPointer(s));
        if (it == m_left.end())
        {
            return;
        }
        while (it->second > 0 && s->GetTxAvailable() > 0)
        {
            uint32_t n = std::min<uint64_t>({it->second, s->GetTxAvailable(), 65536u});
            auto pace = m_pace.find(PeekPointer(s));
            if (pace != m_pace.end() && m_headerSent.count(PeekPointer(s)))
            {
                if (pace->second.credit < 1.0)
                {
                    return;
                }
                n = std::min<uint64_t>(n, uint64_t(pace->second.credit));
            }
            Ptr<Packet> p;
            if (!m_headerSent.count(PeekPointer(s)))
            {
                if (s->GetTxAvailable() < 8)
                {
                    return;
                }
                uint8_t hdr[8]; // the size first (0: unbounded), so that the receiver knows when it has all
                uint64_t v = m_sizeOf[PeekPointer(s)];
                for (int i = 7; i >= 0; i--)
                {
                    hdr[i] = v & 0xFF;
                    v >>= 8;
                }
                p = Create<Packet>(hdr, 8);
                m_headerSent.insert(PeekPointer(s));
            }
            else
            {
                p = Create<Packet>(n);
            }
            int sent = s->Send(p);
            if (sent <= 0)
            {
                return;
            }
            it->second -= sent;
            if (pace != m_pace.end() && m_headerSent.count(PeekPointer(s)))
            {
                pace->second.credit -= sent;
            }
        }
        if (it->second == 0)
        {
            uint32_t id = m_flowOf[PeekPointer(s)];
            results[id].end = Simulator::Now().GetSeconds();
            results[id].ok = true;
            m_left.erase(it);
            Finished(s);
        }
    }

    // A connection whose flow is over is left open and idle, never closed: ns-3 3.44's TCP crashes
    // (TcpTxBuffer::Update, reached from TcpSocketBase::ProcessWait) processing SACK blocks in the
    // closing states under heavy reordering (per-packet balancing), whenever it closes (at once, or
    // after every byte was acknowledged). No FIN is sent; every time the engine measures is taken
    // before a close would have been.
    static void Finished(Ptr<Socket>)
    {
    }

    // ----- the server sides ------------------------------------------------------------------------
    static void ServerCongState(Host* h, uint64_t key, TcpSocketState::TcpCongState_t,
                                TcpSocketState::TcpCongState_t to)
    {
        if (to == TcpSocketState::CA_LOSS)
        {
            h->serverRto[key]++;
        }
    }

    void RrAccept(Ptr<Socket> s, const Address& from)
    {
        InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
        uint64_t key = (uint64_t(a.GetIpv4().Get()) << 16) | a.GetPort();
        s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&Host::ServerCongState, this, key));
        if (rrTos && !marker)
        {
            s->SetIpTos(rrTos);
        }
        m_server[PeekPointer(s)] = ServerConn();
        s->SetRecvCallback(MakeCallback(&Host::RrRecv, this));
        s->SetSendCallback(MakeCallback(&Host::RrSend, this));
        m_socks.push_back(s);
    }

    void RrRecv(Ptr<Socket> s)
    {
        auto it = m_server.find(PeekPointer(s));
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            if (it == m_server.end() || it->second.started)
            {
                continue;
            }
            ServerConn& c = it->second;
            uint32_t take = std::min<uint32_t>(8 - c.have, p->GetSize());
            p->CopyData(c.hdr + c.have, take);
            c.have += take;
            if (c.have == 8)
            {
                c.started = true;
                c.left = 0;
                for (int i = 0; i < 8; i++)
                {
                    c.left = (c.left << 8) | c.hdr[i];
                }
                RrSend(s, s->GetTxAvailable());
            }
        }
    }

    void RrSend(Ptr<Socket> s, uint32_t)
    {
        auto it = m_server.find(PeekPointer(s));
        if (it == m_server.end() || !it->second.started)
        {
            return;
        }
        ServerConn& c = it->second;
        while (c.left > 0 && s->GetTxAvailable() > 0)
        {
            uint32_t n = std::min<uint64_t>({c.left, s->GetTxAvailable(), 65536u});
            int sent = s->Send(Create<Packet>(n));
            if (sent <= 0)
            {
                return;
            }
            c.left -= sent;
        }
        if (c.left == 0)
        {
            m_server.erase(it);
            Finished(s);
        }
    }

    void SinkAccept(Ptr<Socket> s, const Address& from)
    {
        InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
        m_peer[PeekPointer(s)] = {a.GetIpv4().Get(), a.GetPort()};
        s->SetRecvCallback(MakeCallback(&Host::SinkRecv, this));
        m_socks.push_back(s);
    }

    void SinkRecv(Ptr<Socket> s)
    {
        auto key = m_peer[PeekPointer(s)];
        SinkConn& c = m_sink[PeekPointer(s)];
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            uint32_t n = p->GetSize(), off = 0;
            if (c.have < 8)
            {
                uint32_t take = std::min<uint32_t>(8 - c.have, n);
                p->CopyData(c.hdr + c.have, take); // (the header is the packet's first bytes)
                c.have += take;
                off = take;
                if (c.have == 8)
                {
                    for (int i = 0; i < 8; i++)
                    {
                        c.size = (c.size << 8) | c.hdr[i];
                    }
                }
            }
            sunk[key] += n - off;
            if (c.have == 8 && c.size && sunk[key] >= c.size && !sunkDone.count(key))
            {
                sunkDone[key] = Simulator::Now().GetSeconds();
            }
        }
    }

    Ptr<Socket> m_rr;
    std::vector<Ptr<Socket>> m_listen;
    std::vector<Ptr<Socket>> m_socks;
    std::map<Socket*, FlowSpec> m_udp;
    std::map<Socket*, Mouse> m_mice;
    std::map<Socket*, uint64_t> m_left;
    std::map<Socket*, uint32_t> m_flowOf;
    std::map<Socket*, ServerConn> m_server;
    std::map<Socket*, std::pair<uint32_t, uint16_t>> m_peer;
    std::map<Socket*, SinkConn> m_sink;
    std::map<Socket*, uint64_t> m_sizeOf;
    std::set<Socket*> m_headerSent;
    struct Pace
    {
        double bytesPerS;
        double credit;
    };
    std::map<Socket*, Pace> m_pace;
};

// ----- building the fabric ---------------------------------------------------------------------
// The time an Ethernet frame takes on the wire beyond a PPP frame of the same datagram (14 bytes of
// header against PPP's 2): with it as the device's interframe gap, a link at ``bps`` carries what an
// Ethernet link at ``bps`` carries, counted as the emulator and sFlow count it (frame bytes).
inline Time
EthernetGap(double bps)
{
    return Seconds(12 * 8 / bps);
}

// A point-to-point link at ``bps`` with ``delay``, the device queue at one packet (the backlog sits in
// the port's queue disc, where the discipline is).
inline NetDeviceContainer
Link(Ptr<Node> a, Ptr<Node> b, double bps, double delay, uint32_t mtu)
{
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(bps))));
    p2p.SetDeviceAttribute("InterframeGap", TimeValue(EthernetGap(bps)));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("1p")));
    return p2p.Install(a, b);
}

// One end of a link sending at another rate (a host that sends into its switch unshaped, as the
// emulator's hosts do: only switch ports are shaped there).
inline void
SetRate(Ptr<NetDevice> dev, double bps)
{
    dev->SetAttribute("DataRate", DataRateValue(DataRate(static_cast<uint64_t>(bps))));
    dev->SetAttribute("InterframeGap", TimeValue(EthernetGap(bps)));
}

// An interface for ``dev`` with one address, up; returns its index.
inline uint32_t
Interface(Ptr<Node> node, Ptr<NetDevice> dev, uint32_t addr, uint32_t mask)
{
    Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
    int32_t i = ipv4->AddInterface(dev);
    ipv4->AddAddress(i, Ipv4InterfaceAddress(Ipv4Address(addr), Ipv4Mask(mask)));
    ipv4->SetUp(i);
    return i;
}

inline Ptr<QueueDisc>
Fifo(Ptr<NetDevice> dev, uint32_t bytes)
{
    TrafficControlHelper tch;
    tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, bytes)));
    return tch.Install(dev).Get(0);
}

// Strict priority over two FIFOs, band 0 (mice) first; packets reach their band by DSCP.
inline Ptr<QueueDisc>
Strict(Ptr<NetDevice> dev, uint32_t miceBytes, uint32_t elephantBytes, uint8_t elephantDscp)
{
    TrafficControlHelper tch;
    uint16_t h = tch.SetRootQueueDisc("ns3::PrioQueueDisc", "Priomap",
                                      StringValue("0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"));
    TrafficControlHelper::ClassIdList cls = tch.AddQueueDiscClasses(h, 2, "ns3::QueueDiscClass");
    tch.AddChildQueueDisc(h, cls[0], "ns3::FifoQueueDisc", "MaxSize",
                          QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, miceBytes)));
    tch.AddChildQueueDisc(h, cls[1], "ns3::FifoQueueDisc", "MaxSize",
                          QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, elephantBytes)));
    Ptr<QueueDisc> qd = tch.Install(dev).Get(0);
    AddDscpFilter(qd, elephantDscp);
    return qd;
}

// A host's own queue: Linux's default, fq_codel.
inline Ptr<QueueDisc>
HostQueue(Ptr<NetDevice> dev)
{
    TrafficControlHelper tch = TrafficControlHelper::Default();
    return tch.Install(dev).Get(0);
}

inline uint64_t
Dropped(Ptr<QueueDisc> qd)
{
    return qd->GetStats().nTotalDroppedPackets;
}

// A held packet-in's IPv4 datagram, as bytes (the controller gets it as a frame).
inline std::string
Datagram(const Punt& p)
{
    Ptr<Packet> c = p.packet->Copy();
    c->AddHeader(p.header);
    std::string out(c->GetSize(), '\0');
    c->CopyData(reinterpret_cast<uint8_t*>(&out[0]), out.size());
    return out;
}

// A packet as a port queue sees it, for the queue-level tests: ``bytes`` of IPv4 with a DSCP, ECT or not.
inline Ptr<QueueDiscItem>
TestItem(uint32_t bytes, uint8_t dscp, bool ect, uint32_t src, uint32_t dst, uint16_t sport)
{
    Ptr<Packet> p = Create<Packet>(bytes > 48 ? bytes - 48 : 0);
    UdpHeader u;
    u.SetSourcePort(sport);
    u.SetDestinationPort(9);
    p->AddHeader(u);
    Ipv4Header h;
    h.SetSource(Ipv4Address(src));
    h.SetDestination(Ipv4Address(dst));
    h.SetProtocol(17);
    h.SetPayloadSize(p->GetSize());
    h.SetDscp(static_cast<Ipv4Header::DscpType>(dscp));
    h.SetEcn(ect ? Ipv4Header::ECN_ECT0 : Ipv4Header::ECN_NotECT);
    return Create<Ipv4QueueDiscItem>(p, Address(), 0x0800, h);
}

inline uint8_t
EcnOf(Ptr<QueueDiscItem> item)
{
    return DynamicCast<Ipv4QueueDiscItem>(item)->GetHeader().GetEcn();
}

inline uint8_t
DscpOf(Ptr<QueueDiscItem> item)
{
    return DynamicCast<Ipv4QueueDiscItem>(item)->GetHeader().GetDscp();
}

inline uint16_t
SportOf(Ptr<QueueDiscItem> item)
{
    UdpHeader u;
    item->GetPacket()->PeekHeader(u);
    return u.GetSourcePort();
}

// Register the TypeIds (a TypeId defined at run time exists once GetTypeId ran).
inline void
Register()
{
    Switch::GetTypeId();
    DscpFilter::GetTypeId();
    HostMarker::GetTypeId();
    Host::GetTypeId();
    PortQueue::GetTypeId();
    IngressTag::GetTypeId();
}

} // namespace fw
