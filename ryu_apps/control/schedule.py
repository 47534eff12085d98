"""When the controller acts: the policy's period, the tick, and early rounds, declared once for every
carrier (the os-ken app on the wall clock, the ns-3 engine's controller on simulated time)."""

PERIOD_S = 1.0  # the policy's period: monitoring's view in, a Reaction out
TICK_S = 0.1  # monitoring's loop and the app's tick: link hold-downs, the liveness model, hot links
EARLY_ROUND_S = 0.2  # at most one early round (a link newly over EFM's threshold) this often


def early_round_due(now: float, last: float) -> bool:
    """Whether an early round may run now, the last one having run at ``last``."""
    return now - last >= EARLY_ROUND_S
