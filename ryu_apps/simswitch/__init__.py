"""simswitch/: an OpenFlow 1.3 switch simulated at the message level, and fabrics of them.

Rule: a switch is fed the bytes a real switch is sent (``wire``: parsed as a switch parses them, answered
as Open vSwitch answers) and keeps its tables in a model of its own (``tables``: flow tables, groups,
meters, the walk of one packet), apart from how messages reach it. ``fabric`` wires switches by a
fabric description and plays the controller. It never imports a mode: what it holds comes only from
messages, so every policy's program is checked through the real message builder. Used by the tests,
the scale benchmark and the packet-level engine; users may import it for their own controller tests.
"""
