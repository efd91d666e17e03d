"""Anytime-valid statistics: valid however often you look, and wherever you stop.

* :mod:`.betting`: the betting confidence sequence for the mean of a [0, 1]-bounded variable
  (Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2024;
  hedged capital with predictable plug-in bets), incremental in the number of observations.
* :mod:`.eprocess`: the paired two-policy e-process (betting against "no difference" on the
  discordant pairs of successes, or on bounded paired return differences).
* :mod:`.race`, :mod:`.race_cs`: ``--stop-when best``, racing K policies on paired seeds (drop each
  once another is shown better by more than eps; family-wise guarantee by a union bound over pairs).
* :mod:`.rules`: the ``--stop-when`` rules (``ci<=EPS``, ``above=T``, ``below=T``, the same for
  ``return:``, and ``decided`` for comparisons), ``--return-bounds``, and the prefix monitor that
  finds the first k at which a rule holds on episodes ``0..k-1``.
* :mod:`.truncated` (with :mod:`.spending` and :mod:`.group_sequential`): truncated designs that
  spend all of alpha by a cap given in advance (exact group-sequential binomial bounds), valid
  only up to that cap, for one policy against a threshold and for two policies on seeds.

Pure NumPy, no I/O: the layers above feed episodes in index order and read decisions back.
"""

from fasteval.types.sequential.betting import BettingCS, betting_cs, log_capital
from fasteval.types.sequential.eprocess import PairedEProcess
from fasteval.types.sequential.race import Race, RaceGate, RaceRule, is_race_rule, parse_race_rule
from fasteval.types.sequential.rules import (
    PrefixGate, StopMonitor, StopRule, parse_return_bounds, parse_stop_rule,
)
from fasteval.types.sequential.truncated import (
    TruncatedDesign, TruncatedPaired, TruncatedStopMonitor, TruncatedThreshold,
)

__all__ = [
    "BettingCS", "PairedEProcess", "PrefixGate", "Race", "RaceGate", "RaceRule", "StopMonitor", "StopRule",
    "TruncatedDesign", "TruncatedPaired", "TruncatedStopMonitor", "TruncatedThreshold",
    "betting_cs", "is_race_rule", "log_capital", "parse_race_rule", "parse_return_bounds", "parse_stop_rule",
]
