"""benches/: ``freeway bench``: measurements of the controller, the switches and the engines that write JSON
(never part of the test suite).

Rule: a bench compares within one run (ratios against its own baseline) and names what it measured on.
"""
