"""scenarios/: ``freeway experiment``'s scenarios: the papers' own experiments and the demo, each a workload
run under modes on an engine, reported beside the ideal.

Rule: a scenario composes workloads, engines and benches' measurements; it adds no engine of its own.
"""
