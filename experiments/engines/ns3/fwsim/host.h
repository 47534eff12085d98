// A port's two bands by DSCP, the host's marking, and a host's flows (mice, elephants, the handshake).
//
// Part of fwsim.cc (Freeway's packet-level engine on ns-3); see that file for the whole.

#pragma once

#include "switch.h"

namespace fw
{
using namespace ns3;

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
// It also demotes, as PIAS's hosts do (``demoteAfter``): once this host has sent more than that many IP bytes
// on a TCP connection, the connection's next packets from here carry ``demoteDscp`` (a host may put its own
// flows below the mice; Freeway's ToRs keep that mark when isolation's ``host_demotion`` is on). A Linux host
// does the same with nftables (ryu_apps/host/demote.py): ``ct direction original ct original bytes > N``.
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
    uint64_t demoteAfter = 0;           // IP bytes a connection sends from here before it is demoted (0: never)
    uint8_t demoteDscp = 0;
    mutable uint64_t demoted = 0;       // packets sent demoted

  private:
    // bytes sent from here per connection: (destination address, source port, destination port)
    mutable std::map<std::tuple<uint32_t, uint16_t, uint16_t>, uint64_t> m_sent;

    int32_t DoClassify(Ptr<QueueDiscItem> item) const override
    {
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (ip && ip->GetHeader().GetProtocol() == 6 && (!dscpOf.empty() || demoteAfter))
        {
            UdpHeader ports; // a TCP header starts with the same two ports
            item->GetPacket()->PeekHeader(ports);
            // the item's header is its own copy, written to the packet when it leaves the queue
            Ipv4Header& h = const_cast<Ipv4Header&>(ip->GetHeader());
            auto it = dscpOf.find(ports.GetSourcePort());
            if (it != dscpOf.end())
            {
                h.SetDscp(static_cast<Ipv4Header::DscpType>(it->second));
            }
            else if (demoteAfter)
            {
                uint64_t& sent = m_sent[{h.GetDestination().Get(), ports.GetSourcePort(), ports.GetDestinationPort()}];
                bool over = sent > demoteAfter; // as nftables' "bytes > N": judged before this packet counts
                sent += item->GetSize();
                if (over)
                {
                    h.SetDscp(static_cast<Ipv4Header::DscpType>(demoteDscp));
                    demoted++;
                }
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
    // one of an announced flow's other TCP subflows (as ``freeway send --subflows N`` sends it): the id of
    // the spec whose announce names it; it starts when that one does, with its share of that one's bytes
    uint32_t lead = UINT32_MAX;
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

    // a bulk sender closes its connection once its bytes are written (``Finished``)
    void CloseWhenDone(bool on)
    {
        closeWhenDone = on;
    }

    bool closeWhenDone = false;
    uint8_t rrTos = 0; // the TOS of the request/response server's answers
    Ptr<HostMarker> marker; // ECN or demotion in use: DSCPs are set at the host's egress, not on the socket

    // (a method, not an assignment from Python: cppyy does not write a Ptr member through)
    void MarkAtEgress(Ptr<QueueDisc> egress, uint64_t demoteAfter = 0, uint8_t demoteDscp = 0)
    {
        marker = CreateObject<HostMarker>();
        marker->demoteAfter = demoteAfter;
        marker->demoteDscp = demoteDscp;
        egress->AddPacketFilter(marker);
        if (rrTos)
        {
            marker->dscpOf[rrPort] = rrTos >> 2; // the request/response server's answers
        }
    }

    uint64_t Demoted() const
    {
        return marker ? marker->demoted : 0;
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

    // each subflow's rate in an ACK, by its source port (ryu_apps/host/handshake.py: after the 24-byte
    // header and the total rate, per subflow its 16 bytes, its rate, its hop count and that many dpids)
    static std::map<uint16_t, double> AckRates(const std::string& s)
    {
        const uint8_t* b = reinterpret_cast<const uint8_t*>(s.data());
        std::map<uint16_t, double> out;
        if (s.size() < 28)
        {
            return out;
        }
        size_t off = 28;
        for (uint32_t i = 0; i < b[6] && off + 24 <= s.size(); i++)
        {
            uint16_t sport = uint16_t(b[off + 8 + 2] << 8 | b[off + 8 + 3]);
            uint32_t rate = uint32_t(b[off + 16]) << 24 | uint32_t(b[off + 17]) << 16 | uint32_t(b[off + 18]) << 8 |
                            uint32_t(b[off + 19]);
            out[sport] = rate;
            off += 24 + 8 * size_t(b[off + 20]);
        }
        return out;
    }

    // ryu_apps/host/agent.py's byte_shares: in proportion to the rates the controller gave, evenly when it
    // gave none (or none to one of them); what the rounding left, a byte each from the first
    static std::vector<uint64_t> ByteShares(uint64_t size, std::vector<double> rates)
    {
        size_t n = rates.size();
        double sum = 0, least = rates.empty() ? 0 : rates[0];
        for (double r : rates)
        {
            sum += r;
            least = std::min(least, r);
        }
        if (sum <= 0 || least <= 0)
        {
            rates.assign(n, 1.0);
            sum = double(n);
        }
        std::vector<uint64_t> per;
        if (n == 0)
        {
            return per;
        }
        uint64_t given = 0;
        for (double r : rates)
        {
            per.push_back(uint64_t(double(size) * r / sum));
            given += per.back();
        }
        for (uint64_t i = 0; given < size; i++, given++)
        {
            per[i % n]++;
        }
        return per;
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
            if (f.lead != UINT32_MAX)
            {
                m_subflows[f.lead].push_back(f); // sent when its lead's handshake is over (``Connect``)
                continue;
            }
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
            if (r.answer == 1)
            {
                std::string bytes(p->GetSize(), '\0');
                p->CopyData(reinterpret_cast<uint8_t*>(&bytes[0]), bytes.size());
                m_given[f.id] = AckRates(bytes);
            }
            m_udp.erase(it);
            u->Close();
            Connect(f);
            return;
        }
    }

    // ----- connections ---------------------------------------------------------------------------
    void Connect(FlowSpec f)
    {
        auto sub = m_subflows.find(f.id);
        if (sub != m_subflows.end()) // an announced flow of several subflows: each its share of the bytes
        {
            std::vector<FlowSpec> all{f};
            all.insert(all.end(), sub->second.begin(), sub->second.end());
            m_subflows.erase(sub);
            std::vector<double> rates;
            for (auto& s : all)
            {
                rates.push_back(m_given.count(f.id) && m_given[f.id].count(s.sport) ? m_given[f.id][s.sport] : 0.0);
            }
            m_given.erase(f.id);
            std::vector<uint64_t> per = ByteShares(f.size, rates);
            for (size_t i = 1; i < all.size(); i++)
            {
                all[i].size = per[i];
                Connect(all[i]);
            }
            f.size = per[0];
        }
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
        Finished(s, true);
    }

    void BulkSend(Ptr<Socket> s, uint32_t)
    {
        auto it = m_left.find(PeekPointer(s));
        if (it == m_left.end())
        {
            CloseIfAcked(s);
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
            Finished(s, true);
        }
    }

    // A bulk sender whose bytes are all written closes (``CloseWhenDone``), so that its FIN tells a switch
    // the flow ended (Freeway's ``release_on_fin``); it closes once every byte it wrote is acknowledged,
    // where a Linux sender closes at once: ns-3 3.44's TCP crashes (TcpTxBuffer::Update, reached from
    // TcpSocketBase::ProcessWait) processing SACK blocks in the closing states, which a FIN sent behind a
    // lost segment brings (a k=8 web-search run, 2026-12-03), and under heavy reordering (per-packet
    // balancing) whenever it closes. So a bulk sender's FIN comes a round trip after a Linux sender's, and
    // under per-packet balancing it never closes. Every other connection whose flow is over is left open
    // and idle. Every time the engine measures is taken before a close would have been.
    void Finished(Ptr<Socket> s, bool bulk = false)
    {
        if (bulk && closeWhenDone)
        {
            m_closing.insert(PeekPointer(s));
            CloseIfAcked(s);
        }
    }

    void CloseIfAcked(Ptr<Socket> s)
    {
        auto it = m_closing.find(PeekPointer(s));
        if (it == m_closing.end())
        {
            return;
        }
        UintegerValue buf;
        s->GetAttribute("SndBufSize", buf);
        if (s->GetTxAvailable() < buf.Get())
        {
            return; // (this is called again as acknowledgements free the buffer)
        }
        m_closing.erase(it);
        s->Close();
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
    std::map<uint32_t, std::vector<FlowSpec>> m_subflows; // an announced flow's other subflows, by its id
    std::map<uint32_t, std::map<uint16_t, double>> m_given; // an ACK's rate per subflow, by the flow's id
    std::map<Socket*, Mouse> m_mice;
    std::map<Socket*, uint64_t> m_left;
    std::set<Socket*> m_closing; // bulk senders done writing, to close once all is acknowledged
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

} // namespace fw
