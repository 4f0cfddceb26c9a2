"""Reading a missing file again, and again.

Flag ``failed_read_again`` when the episode has at least one read that the optional
``failed_reads_again`` reward charges: it reads them with the reward's own function
(:func:`composer_rewards.rewards.failed_reads.failed_reads_again`), so the flag and the
charge agree on every read, and its evidence lists them. Metric ``failed_reads_again``:
how many there were. The monitor is a built-in and the reward is not, so a run watches the
rate from its first step and a reward against it can be added while it runs.
"""

from __future__ import annotations

from composer_hooks import hookimpl
from composer_rewards.episode import Episode
from composer_rewards.results import MonitorReport
from composer_rewards.rewards.failed_reads import failed_reads_again

FLAG = "failed_read_again"


class FailedReadAgainMonitor:
    name = "failed_read_again"

    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        found = failed_reads_again(episode)
        return MonitorReport(
            metrics={"failed_reads_again": len(found)},
            flags={FLAG: "; ".join(read.describe() for read in found)} if found else {},
        )
