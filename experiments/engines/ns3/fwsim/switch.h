// One OpenFlow switch as an ns-3 Ipv4RoutingProtocol, and its port counters.
//
// Part of fwsim.cc (Freeway's packet-level engine on ns-3); see that file for the whole.

#pragma once

#include "port-queue.h"

namespace fw
{
using namespace ns3;

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
                f.tcpFlags = t.GetFlags();
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
            case F_TCP_FLAGS:
                if (f.proto != 6 || !f.l4)
                {
                    return false;
                }
                have = f.tcpFlags;
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

} // namespace fw
