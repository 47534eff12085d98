"""control/: the controller process's control pieces, each deciding on plain values.

Rule: when the controller acts (``schedule``: the period, the tick, early rounds, for every carrier), which
links are up (``liveness``), the LLDP link check (``linkwatch``), the isolation queues kept
through OVSDB (``queue_keeper``), the cluster's election in etcd (``cluster``) and what a member does
when its role changes (``handover``). Each decides with ``now`` and events in and plans out; the only
I/O (etcd, ovs-vsctl) is in named functions the app runs in a thread.
"""
