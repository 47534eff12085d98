"""experiments/: the lab around the controller, in rooms by role.

Rule: a room imports only from rooms below it (the order is ``tests/unit/test_layers.py``'s ``LAYERS``,
checked on every import), and only ``cli`` lives at the top. The rooms, bottom to top:

``analysis`` statistics (one percentile), results and plots; ``workloads`` every generator and reader of
flows and the data they come from; ``hosts`` the programs that run inside emulated hosts; ``harness`` the
processes a run starts (the controller, etcd, a browser); ``engines`` where flows run (the emulator on Open
vSwitch, ns-3); ``testing`` the pytest plugin and its simulated fabric; ``benches`` ``freeway bench``;
``scenarios`` ``freeway experiment``'s scenarios; ``sweep`` grids of runs on Dask; ``cli`` the commands.
"""
