// Building the fabric: links, queues, filters, and what Python reads back.
//
// Part of fwsim.cc (Freeway's packet-level engine on ns-3); see that file for the whole.

#pragma once

#include "host.h"

namespace fw
{
using namespace ns3;

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
