"""harness/: the processes a run or a test starts the way a user would: the controller (``freeway
controller``), an etcd cluster, a headless browser.

Rule: every process started here is stopped by the same object, by its process id, however the run ends.
"""
