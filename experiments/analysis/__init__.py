"""analysis/: statistics, result writers and plots (pure: values and files in, values and files out).

Rule: nothing here starts a process, a fabric or a simulator; every percentile is ``stats.percentile``.
"""
