"""host/: what runs on a host, not in the controller.

Rule: ``freeway send`` (``agent``), ``freeway run`` (``hookrun``: the connect() hook), ``freeway host-demote``
(``demote``: the host's nftables rule that lowers its own long connections) and the handshake's wire format
(``handshake``) that both sides speak. Imports nothing of the controller.
"""
