"""The doors: the ``fasteval`` command, LeRobot's flags, sweeps, the bench harness and suites.

Each door builds specs and hands them to the engine; none holds rollout logic of its own.
"""
