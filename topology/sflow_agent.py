"""sFlow agent settings pushed to every bridge by the fabric builder.

Defaults follow the link rate: 1-in-N sampling with N = link rate in Mbit/s
(1-in-10 at 10 Mbit/s as in the EFM paper, 1-in-1000 at 1 Gbit/s as sFlow.org
suggests), counters polled every second, 128 header bytes (enough for
Ethernet + VLAN + IPv4 options + TCP ports).
"""

from __future__ import annotations

import ipaddress
import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class SFlowAgentConfig:
    target: str = "127.0.0.1:6343"
    sampling: int = 10
    polling: int = 1
    header: int = 128
    agent: str = "lo"
    agents: str = ""  # a prefix (127.0.1.0/24): every bridge exports under its own address from it

    def agent_addresses(self, bridges: list[str]) -> dict[str, str]:
        """Each bridge's own agent address (``agents``), by sorted name; {} when they share ``agent``."""
        if not self.agents:
            return {}
        net = ipaddress.ip_network(self.agents, strict=False)
        hosts = list(itertools.islice(net.hosts(), len(bridges) + 1))
        if len(hosts) < len(bridges):
            raise ValueError(f"sflow agents: {self.agents} has fewer than {len(bridges)} addresses")
        return {br: str(ip) for br, ip in zip(sorted(bridges), hosts, strict=False)}

    def __post_init__(self) -> None:
        for target in self.targets:  # one collector, or several (one per controller of a cluster)
            host, sep, port = target.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"sflow target: expected HOST:PORT[,HOST:PORT...], got {self.target!r}")
        for key in ("sampling", "polling", "header"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"sflow {key}: must be a positive integer, got {v!r}")
        if self.agents:
            try:
                ipaddress.ip_network(self.agents, strict=False)
            except ValueError:
                raise ValueError(f"sflow agents: expected a prefix such as 127.0.1.0/24, got {self.agents!r}") from None
        if not 18 <= self.header <= 256:
            raise ValueError(f"sflow header: must be 18..256 bytes, got {self.header}")

    @property
    def targets(self) -> list[str]:
        return [t.strip() for t in self.target.split(",")]

    @classmethod
    def for_rate(cls, rate_mbps: float, mtu: int = 1500, **overrides) -> SFlowAgentConfig:
        """1-in-(rate in Mbit/s) at the standard MTU: about 83 samples/s from a full port of full-size
        frames at any rate. Larger frames are fewer packets for the same bytes, so the sampling is
        scaled by 1500/mtu to keep about as many samples of the same traffic."""
        base = {"sampling": max(1, round(rate_mbps * 1500 / mtu))}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def vsctl_args(self, bridges: list[str]) -> list[str]:
        """One ovs-vsctl transaction creating a shared sFlow record and attaching it to every bridge (with
        ``agents``: one record per bridge, each with the bridge's own agent address)."""
        targets = ",".join(f'"{t}"' for t in self.targets)
        own = self.agent_addresses(bridges)
        args = []
        for n, br in enumerate(bridges):
            if n == 0 or own:
                ref = f"@sf{n}" if own else "@sf"
                args += ["--", f"--id={ref}", "create", "sflow", f"agent={own.get(br, self.agent)}",
                         f"target=[{targets}]", f"header={self.header}", f"sampling={self.sampling}",
                         f"polling={self.polling}", "external-ids:freeway=1"]
            args += ["--", "set", "bridge", br, f"sflow={ref}"]
        return args[1:]
