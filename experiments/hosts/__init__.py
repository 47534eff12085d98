"""hosts/: the programs that run inside an emulated host (``python -m experiments.hosts.X``): flow lists,
request/response mice, bursts of short flows, handshake load.

Rule: standard library and ``ryu_apps.host`` only, since they run in a host's namespace with a bare
interpreter; they print JSON for the engine that started them.
"""
