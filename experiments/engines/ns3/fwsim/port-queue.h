// A port's queue: strict-priority bands, per-port buffer, per-priority pause accounting.
//
// Part of fwsim.cc (Freeway's packet-level engine on ns-3); see that file for the whole.

#pragma once

#include "types.h"

namespace fw
{
using namespace ns3;

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

    // ``elephant_min_share``: the elephant band's assured rate, bytes a second, and its bucket (see DoDequeue)
    void SetMinRate(double bytesPerS, double burstBytes)
    {
        minRate = bytesPerS;
        minBurst = burstBytes;
        m_tokens = burstBytes;
    }

    // ``shared``: the two bands by DSCP only (no flow is short by its bytes), one buffer, strict priority,
    // and a mouse arriving at a full buffer pushes the oldest elephant packet out, the head of the elephant band
    // (no headroom, no back-off)
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
    uint64_t assured = 0; // elephant packets sent ahead of waiting mice by the band's assured rate

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
    double minRate = 0; // the elephant band's assured rate, bytes a second (0: strict priority)
    double minBurst = 0;

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

    // The elephant band's assured rate (``elephant_min_share``, as the emulator's HTB class for the
    // elephants is assured it): it earns tokens at ``rate`` bytes a second, at most ``burst``, and goes ahead
    // of the mice while it has a packet's worth; every packet it sends spends them (down to none). 0: strict.
    Ptr<QueueDiscItem> DoDequeue() override
    {
        uint32_t first = 0;
        if (minRate > 0 && bands > 1)
        {
            double now = Simulator::Now().GetSeconds();
            m_tokens = std::min(minBurst, m_tokens + (now - m_tokensAt) * minRate);
            m_tokensAt = now;
            uint32_t head = !m_backoff.empty() ? m_backoff.front()->GetSize()
                            : !Empty(1)        ? GetInternalQueue(1)->Peek()->GetSize()
                                               : 0;
            if (head && !paused[1] && m_tokens >= head)
            {
                first = 1;
            }
        }
        Ptr<QueueDiscItem> item = DequeueFrom(first);
        if (item && minRate > 0 && m_lastBand == 1)
        {
            m_tokens = std::max(0.0, m_tokens - item->GetSize());
            assured += first == 1 && !Empty(0) ? 1 : 0;
        }
        return item;
    }

    Ptr<QueueDiscItem> DequeueFrom(uint32_t first)
    {
        for (uint32_t i = 0; i < bands; i++)
        {
            uint32_t b = (first + i) % bands;
            m_lastBand = b;
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

    double m_tokens = 0;
    double m_tokensAt = 0;
    uint32_t m_lastBand = 0;
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

} // namespace fw
