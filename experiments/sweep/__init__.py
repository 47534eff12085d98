"""Sweeps: grids of runs as Dask tasks into a Parquet results store, and reports from it.

Rule: the spec and the store are plain data and files; only ``run`` talks to Dask, and a task (``task``)
runs its simulation in a process of its own, never in the worker.
"""
