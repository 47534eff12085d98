"""programs/: what a switch holds, as intents.

Rule: base forwarding and the guard (``forwarding``), proxy ARP (``arp``), isolation's marks and meters
(``isolation``), the mice groups a switch holds (``mice_table``), exact-match pins (``pins``), Hedera's
edge entries (``hedera_edges``). Pure: fabric, decisions and ids in, intents out; no mode's state.
"""
