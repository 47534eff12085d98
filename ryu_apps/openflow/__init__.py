"""openflow/: Freeway's OpenFlow pipeline and the one place its messages are built.

Rule: the pipeline as data (``pipeline``: tables, priority bands, cookie spaces, group and meter ids),
plain intents (``intents``), the message builder and parser (``ofmsg``, on ``framework``, the one module
that imports os-ken), the difference a switch must be sent (``reconcile``) and confirmed installs
(``txn``). It knows nothing of modes, algorithms or the process; everything above builds on it.
"""
