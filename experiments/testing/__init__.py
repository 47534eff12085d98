"""testing/: a pytest plugin (``pytest11``: installed with the package) and the simulated fabric it drives, for
testing any OpenFlow 1.3 controller: Freeway's, a user's own os-ken app, or a plug-in mode.

Rule: what a test gets here is what a user would run: real connections, real processes (the controller is
started as a user starts it), nothing of the controller under test imported into the test's process; every
process and namespace a fixture starts is stopped when the test ends, however it ends.
"""
