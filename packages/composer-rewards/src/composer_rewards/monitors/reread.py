"""Reading a file again for nothing.

Flag ``reread`` when the episode has at least one read that the ``redundant_reads`` reward
charges: it reads them with the reward's own function
(:func:`composer_rewards.rewards.redundant_reads.redundant_reads`), so the flag and the
charge agree on every read, and its evidence lists them. Metric ``redundant_reads``: how
many there were. A monitor changes no reward, so with the reward blocked (or before it is
added to a running job) the rate it measures is the policy's own.
"""

from __future__ import annotations

from composer_hooks import hookimpl
from composer_rewards.episode import Episode
from composer_rewards.results import MonitorReport
from composer_rewards.rewards.redundant_reads import redundant_reads

FLAG = "reread"


class RereadMonitor:
    name = "reread"

    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        found = redundant_reads(episode)
        return MonitorReport(
            metrics={"redundant_reads": len(found)},
            flags={FLAG: "; ".join(read.describe() for read in found)} if found else {},
        )
