"""workloads/: every generator and reader of flows (published size distributions, Poisson arrivals, SWIM,
the field's FCT benchmark, the EFM collision tests) and the data files they read (``data/``, with licences).

Rule: pure: a seed and settings in, a list of flows out, the same for every engine.
"""
