"""When the controller acts: the policy's period, the tick, and early rounds, declared once for every
carrier (the os-ken app on the wall clock, the ns-3 engine's controller on simulated time)."""

PERIOD_S = 1.0  # the policy's period: monitoring's view in, a Reaction out
TICK_S = 0.1  # monitoring's loop and the app's tick: link hold-downs, the liveness model, hot links
EARLY_ROUND_S = 0.2  # at most one early round (a link newly over EFM's threshold) this often
EVENT_TURN_S = 0.01  # the app's queued events handled one after another for this long, then the loop is let go
ANSWER_WAIT_S = 0.02  # a piece of background work waits at most this long for the answers hosts await
ANSWER_FRESH_S = 0.25  # ... and only for answers asked this recently (an older one waits on a slow switch)


def early_round_due(now: float, last: float) -> bool:
    """Whether an early round may run now, the last one having run at ``last``."""
    return now - last >= EARLY_ROUND_S


def events_turn(now: float, started: float, waited: bool, more: bool = True) -> tuple[float, bool]:
    """The os-ken app's handler loop takes its queued events one after another and lets the event loop go
    only when the queue is empty: a burst of monitoring's elephants (each placed: 2-5 ms at k=48) held it
    up to 212 ms, and every switch's barrier replies with it. Given when the loop's current turn started
    and whether the queue was empty after the previous event (``waited``: then the loop slept until this
    one, and its turn starts now), (the turn's start, whether to let the loop go before this event). Only
    while ``more`` events wait: the event in hand is then in neither the queue nor the socket, and a
    read-back's reply there would read as not behind (``_behind``)."""
    if waited:
        return now, False
    if now - started >= EVENT_TURN_S and more:
        return now, True
    return started, False


def gives_way(waited: float, awaited: int) -> bool:
    """Whether the next piece of background work on the os-ken app's one event loop (a part of the period,
    the tick's collection, a part of monitoring's round: 10-35 ms each at k=48) waits a little longer,
    having waited ``waited`` s, while ``awaited`` transactions a host awaits the answer of (a handshake's
    entries, sent and not yet confirmed) are open. Their answer needs the loop for every switch's barrier
    reply and then the ACK; each piece started meanwhile is paid in full by it (at k=48 a handshake's p99
    was three or four such pieces, 2026-12-05). Never longer than ``ANSWER_WAIT_S``, and only for answers
    begun within ``ANSWER_FRESH_S`` (the caller counts those): background work is late, never starved, and
    a switch that does not confirm holds it back for a quarter of a second, not until the transaction expires."""
    return awaited > 0 and waited < ANSWER_WAIT_S
