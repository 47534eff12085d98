"""algorithms/: the decisions, as plain values.

Rule: Freeway's partition and mice routes (``partition``), Bin-Pack (``binpack``), max-min shares
(``maxmin``), Hedera's demand estimation and Global First Fit (``hedera_gff``), EFM's rounds
(``efm_rounds``). Plain values in, plain values out: no intents, no OpenFlow, no clock, no socket.
"""
