"""behaviour-reward: watch a behaviour, then add a reward for it to the running job.

The report's practice: behaviour monitors flag what a policy does on every episode, and
when a habit shows up at a rate worth acting on, a reward against it is added to the job
while it runs; the run goes on from where it was, and the flagged rate on new episodes
should fall. This study does that on one real RL run (the real loop, services in one
process), the way a user would.

**The behaviour** is a setting (`--behaviour`, `StudyOptions.behaviour`), each with a monitor
that flags exactly what its matching reward charges (`WATCHES`):

- `reread` (the default): the episode reads a file it has already read, with nothing between
  that could have changed it (composer-rewards' `redundant_reads` reading). The stage-one
  SFT policy reads a file twice with no successful edit of it between in 0.137 of its T=1
  episodes and 0.210 greedily (`composer_rl.eval.behaviour`'s `reread`, a broader reading:
  a failed edit or a writing command between does not make the second read new there;
  docs/rl/2026-12-04-copy-kept.md). The monitor is composer-rewards' built-in `reread`
  (registered under that name in every run); the reward is the built-in `redundant_reads`,
  whose `redundant_reads` component charges each read the monitor flags.
- `todo_left`: the diff adds a TODO, FIXME or XXX marker. composer-rewards has no monitor
  for it, so :class:`TodoLeftMonitor` below is one, listed in the run config's
  `plugins.plugins`; it finds the markers with the `unfinished` reward's own parser
  (`composer_rewards.rewards.unfinished.placeholders`), so it flags exactly the lines the
  reward's `unfinished_code` component charges. The SFT policy leaves a TODO in only 0.009
  of its T=1 episodes: too rare to show a fall, which the verdict rule reports as such.
- `failed_read_again`: the episode reads a missing file again, with nothing between that
  could have made it (composer-rewards' `failed_reads_again` reading). The mix's SFT policy
  does it in 0.57 of its greedy `validation_words` episodes
  (docs/rl/2026-12-05-failed-read-loops.md), but in only 0.075 ± 0.014 of its T=1
  episodes on training tasks, the ones RL samples (the full study's before window, seed 0). The monitor is the built-in
  `failed_read_again`; the reward, `failed_reads_again`, is optional (not a built-in), so
  the add registers it for the first time.

The steps, the same for every behaviour:

- **The monitor** flags the behaviour on every episode from the first step.
- **The matching reward** is blocked at the start (`plugins.block = [<reward>]`), so the
  first steps train without it.
- **The add.** After step `add_at - 1` the study runs `composer-rl plugins add --run
  RUN_DIR --name <reward> <reward spec>` (the command itself, in a process of its own: it
  checks the spec in the job's interpreter and writes the request file, as from a shell).
  The job applies it at its next step boundary, step `add_at`, and records the event in
  that step's metrics line and in `plugins/processed/`. The command is issued from the
  loop's step-boundary callback rather than from another shell only so that it lands on the
  configured step; from a shell it lands on whichever boundary comes next. The run then
  goes on to its last step.

**Windows, by the policy version that sampled each episode** (the `versions` of its tokens
in `episodes/episodes.jsonl`). Version v is the policy after v steps; the add comes right
after version `add_at` is trained, so versions 0..add_at never saw the reward. An episode
all of whose tokens were sampled by those versions is *before*; one whose oldest token was
sampled by version add_at + settle + 1 or later is *after*. The `settle` versions between
are the reward's time to act (`Sizes.settle`): a reward moves the policy a little each step,
and a window that starts at the add averages the settled rate with the unmoved one. They
are left out and counted, as are episodes with tokens on both sides of the add (the
engines take new weights mid-episode).

The full study's settle of 10 was not chosen before its first run. That run (seed 0,
2026-12-05) judged the window from version add_at + 1 and did not hold (a fall of 1.1
standard errors); its rate stayed where it was for ten versions and then fell. The window
from version add_at + 11 was written down before the seed-1 runs started and judged on
them (docs/rl/2026-12-05-behaviour-reward.md); seed 0 under it is a post-hoc figure. Which episodes carry the
reward's component is a different matter: every episode scored after the add does
(`scored_after_step >= add_at`), including some sampled before it.

**Standard errors are over groups.** A group is the G episodes of one task, sampled
together; they share the task, so they are not independent draws and the group is the
unit. A window's rate is flagged episodes / episodes, and its standard error the
cluster-robust one of that ratio over the window's groups,
sqrt(k / (k - 1) * sum_g (f_g - rate * n_g)^2) / N for k groups of n_g episodes with f_g
flagged, N = sum n_g. The windows hold different groups (training is single-epoch), so the
difference's standard error is sqrt(se_before^2 + se_after^2).

**The control.** The full study also trains a second run from the same checkpoint, seed and
settings without the add. Without it a fall after the add could be RL's own drift (the
policy may leave the habit as it learns anything else); the control's rate over the same
after-window versions says how much the rate falls anyway.

**The verdict rule** (z = fall / its standard error):

- *undecided*: fewer than `MIN_GROUPS` groups in a window, fewer than `MIN_FLAGGED`
  flagged episodes before the add (too rare to show a fall), or a zero standard error;
- *held*: the rate after is below the rate before by more than 3 standard errors of the
  difference, and, where the control ran, below the control's rate over the same versions
  by more than 3 standard errors as well;
- *held in part*: not held, but both of those falls are beyond 2 standard errors;
- *did not hold*: otherwise (a fall within 2 standard errors, a rise, or a control that
  fell as much).

`result.json`'s `held` is true only for *held*; its `verdict` is one of the four labels of
`composer_rl.studies.base.VerdictLabel`, and `verdict_detail` says which part or what it rests on.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from composer_rewards import Episode, MonitorReport, hookimpl
from composer_rewards.monitors.failed_read_again import FLAG as FAILED_READ_FLAG
from composer_rewards.monitors.failed_read_again import FailedReadAgainMonitor
from composer_rewards.monitors.reread import FLAG as REREAD_FLAG
from composer_rewards.monitors.reread import RereadMonitor
from composer_rewards.rewards.failed_reads import FailedReadsAgainPenalty
from composer_rewards.rewards.redundant_reads import RedundantReadsPenalty
from composer_rewards.rewards.unfinished import UnfinishedWorkPenalty, placeholders
from composer_rl.agent.quick import random_checkpoint
from composer_rl.eval.stats import format_se
from composer_rl.plugins.requests import recent
from composer_rl.rl.config import load_config
from composer_rl.rl.episodes import read_episodes
from composer_rl.rl.lineage import final_lineage
from composer_rl.rl.quick import QUICK_RL_SETTINGS
from composer_rl.stages.metrics import read_metrics as read_metrics_file
from composer_rl.studies.base import (
    RANDOM_POLICY_NOTE,
    StudyOptions,
    StudyOutcome,
    Verdict,
    WatchedBehaviour,
)
from composer_rl.studies.rl_runs import (
    WEIGHTS_RECORD,
    RLSizes,
    finished_history,
    run_rl_reporting,
    study_settings,
    weights_digest,
)

MARKERS = frozenset({"TODO", "FIXME", "XXX"})
# The added reward's weight. Both rewards default to 0.2, a shaping term kept small beside
# correctness in a run that carries it from the start. Under Dr. GRPO's unscaled advantages
# that makes one redundant read cost 0.05 of a solve, small beside the run's other rewards;
# a user who adds a reward to stop a habit they watched gives it weight.
# At 1.0 one flagged read (or marker) costs 0.25 of a solve. Set before any full run.
REWARD_WEIGHT = 1.0
MIN_GROUPS = 5
MIN_FLAGGED = 5
RUNS = ("with-reward", "control")


@dataclass(frozen=True)
class Watch:
    """A behaviour the study can watch: its monitor and the reward that charges it."""

    behaviour: WatchedBehaviour
    description: str  # what the monitor flags, in words
    monitor: str  # the name the monitor is registered under (a spec, for `plugins.plugins`)
    listed: bool  # the monitor goes in the run config's `plugins.plugins` (not a built-in)
    flag: str  # the monitor's flag
    reward_name: str
    reward_spec: str
    component: str  # the reward's component that charges what the monitor flags
    weight: float  # the added reward's weight in the run config (`rewards.<name>.weight`)

    @property
    def flag_key(self) -> str:
        """The flag's key in an episode line: flags are keyed `<plugin>/<flag>`, and a
        monitor listed in `plugins.plugins` is registered under its spec."""
        return f"{self.monitor}/{self.flag}"


class TodoLeftMonitor:
    """Flags `todo_left` when the diff adds a TODO, FIXME or XXX marker.

    A monitor, not a reward: it changes no episode's reward, so the rate it measures before
    the add is the policy's own. It reads the markers with the `unfinished` reward's parser,
    so the flag and the reward's `unfinished_code` charge agree on every marker line.
    """

    @hookimpl
    def composer_monitor(self, episode: Episode) -> MonitorReport:
        found = [p for p in placeholders(episode) if p.rsplit(": ", 1)[-1] in MARKERS]
        return MonitorReport(
            metrics={"todo_markers": len(found)},
            flags={"todo_left": "; ".join(found)} if found else {},
        )


WATCHES: dict[WatchedBehaviour, Watch] = {
    "reread": Watch(
        behaviour="reread",
        description="a file read again with nothing between that could have changed it",
        monitor=RereadMonitor.name,
        listed=False,
        flag=REREAD_FLAG,
        reward_name=RedundantReadsPenalty.name,
        reward_spec="composer_rewards.rewards.redundant_reads:RedundantReadsPenalty",
        component="redundant_reads",
        weight=REWARD_WEIGHT,
    ),
    "todo_left": Watch(
        behaviour="todo_left",
        description=f"the diff adds a {'/'.join(sorted(MARKERS))} marker",
        monitor="composer_rl.studies.behaviour_reward:TodoLeftMonitor",
        listed=True,
        flag="todo_left",
        reward_name=UnfinishedWorkPenalty.name,
        reward_spec="composer_rewards.rewards.unfinished:UnfinishedWorkPenalty",
        component="unfinished_code",
        weight=REWARD_WEIGHT,
    ),
    "failed_read_again": Watch(
        behaviour="failed_read_again",
        description="a missing file read again with nothing between that could have made it",
        monitor=FailedReadAgainMonitor.name,
        listed=False,
        flag=FAILED_READ_FLAG,
        reward_name=FailedReadsAgainPenalty.name,
        reward_spec="composer_rewards.rewards.failed_reads:FailedReadsAgainPenalty",
        component="failed_reads_again",
        weight=REWARD_WEIGHT,
    ),
}
"""Each behaviour the study can watch (`StudyOptions.behaviour`), by name."""


@dataclass(frozen=True)
class Sizes:
    steps: int
    group_size: int
    groups_per_step: int
    add_at: int  # the step boundary the reward is added at
    settle: int  # versions after the add that neither window counts (the reward's time to act)
    lr: float | None  # None: the RL config's default
    control: bool  # train the run without the add too


QUICK = Sizes(steps=8, group_size=2, groups_per_step=2, add_at=4, settle=0, lr=None, control=True)
# lr 3e-4 as in the learning runs of the composer-rl README (at 1e-4 the policy moves too
# little in a few dozen steps for any reward to change behaviour); ten steps before the add
# measure the starting rate over about 600 episodes; of the twenty after, the first ten are
# the reward's time to act (see the module docstring for how that was fixed) and the last
# nine are judged.
FULL = Sizes(steps=30, group_size=8, groups_per_step=8, add_at=10, settle=10, lr=3e-4, control=True)


# --- the runs ------------------------------------------------------------------------------


def run_settings(
    model: Path, run_dir: Path, sizes: Sizes, base: dict[str, object], seed: int, watch: Watch
) -> dict[str, object]:
    """The RL settings of either run: the monitor on, the reward blocked, upsampling and
    evaluations off (upsampling reads the episodes, so the two runs would draw other tasks)."""
    rl = RLSizes(sizes.steps, sizes.group_size, sizes.groups_per_step, sizes.lr)
    settings = study_settings(model, run_dir, rl, base, seed)
    settings["plugins.block"] = [watch.reward_name]
    settings["plugins.plugins"] = [watch.monitor] if watch.listed else []
    # Read by the reward's configure hook when `plugins add` registers it (a historic hook:
    # a plugin added mid-run is configured with the run's config like one there from the start).
    settings[f"rewards.{watch.reward_name}.weight"] = watch.weight
    return settings


def add_command(run_dir: Path, watch: Watch) -> list[str]:
    """`composer-rl plugins add` as a user types it for this run (argv after the program)."""
    return ["plugins", "add", "--run", str(run_dir), "--name", watch.reward_name, watch.reward_spec]


def adder(run_dir: Path, add_at: int, watch: Watch) -> Callable[[int], None]:
    """The loop's step-boundary callback that runs the add command after step add_at - 1,
    so the job applies it at the boundary of step add_at. The command runs in a process of
    its own (`python -m composer_rl.cli`, this interpreter), as from a shell."""
    arguments = add_command(run_dir, watch)
    command = [sys.executable, "-m", "composer_rl.cli", *arguments]

    def boundary(step: int) -> None:
        if step == add_at - 1:
            code = subprocess.run(command, check=False).returncode
            if code != 0:
                raise RuntimeError(f"`composer-rl {' '.join(arguments)}` exited {code}")

    return boundary


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's step rows of its final lineage (steps lost to a kill left out)."""
    return final_lineage(read_metrics_file(run_dir))


def add_step(metrics: list[dict[str, Any]], watch: Watch) -> int | None:
    """The step whose metrics line records the reward's add (None: it was never added)."""
    key = f"plugins/add/{watch.reward_name}"
    return next((int(r["step"]) for r in metrics if r.get(key) == 1.0), None)


def train(
    model: Path,
    run_dir: Path,
    sizes: Sizes,
    base: dict[str, object],
    seed: int,
    watch: Watch,
    add: bool,
) -> bool:
    """Train one run into `run_dir` (the add at `sizes.add_at` when `add`); returns whether
    a finished run there under the same config (and, with the add, added at that step) was
    reused instead."""
    config = load_config(None, run_settings(model, run_dir, sizes, base, seed, watch))
    finished = finished_history(run_dir, config)
    if finished is not None:
        at = add_step(read_metrics(run_dir), watch)
        if at == (sizes.add_at if add else None):
            return True
    shutil.rmtree(run_dir, ignore_errors=True)
    digest = weights_digest(model)
    run_rl_reporting(config, step_boundary=adder(run_dir, sizes.add_at, watch) if add else None)
    if digest is not None:
        (run_dir / WEIGHTS_RECORD).write_text(digest + "\n")
    return False


# --- the measurement -----------------------------------------------------------------------


def window_of(episode: dict[str, Any], add_at: int, settle: int = 0) -> str | None:
    """'before', 'settling', 'after', or 'straddling' by the versions that sampled the
    episode's tokens (None: it sampled none)."""
    versions = episode["versions"]
    if not versions:
        return None
    if max(versions) <= add_at:
        return "before"
    if min(versions) > add_at + settle:
        return "after"
    if min(versions) > add_at:
        return "settling"
    return "straddling"


def rate(episodes: Iterable[dict[str, Any]], flag: str) -> dict[str, Any]:
    """The rate of episodes flagged `flag` (an episode line's flag key) and the solve rate
    of `episodes`, each with its cluster-robust standard error over groups (NaN below two
    groups)."""

    def flagged(episode: dict[str, Any]) -> bool:
        return flag in episode["flags"]

    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        groups[e["group"]].append(e)
    n = sum(len(g) for g in groups.values())

    def ratio(value: Callable[[dict[str, Any]], bool]) -> tuple[float, float]:
        if n == 0:
            return math.nan, math.nan
        totals = [(sum(value(e) for e in g), len(g)) for g in groups.values()]
        mean = sum(f for f, _ in totals) / n
        k = len(totals)
        if k < 2:
            return mean, math.nan
        spread = sum((f - mean * m) ** 2 for f, m in totals)
        return mean, math.sqrt(k / (k - 1) * spread) / n

    return {
        "groups": len(groups),
        "episodes": n,
        "flagged": sum(flagged(e) for g in groups.values() for e in g),
        "rate": ratio(flagged),
        "solved": ratio(lambda e: bool(e["solved"])),
    }


def by_version(episodes: list[dict[str, Any]], flag: str) -> dict[int, dict[str, Any]]:
    """The flagged rate of the episodes started by each policy version (oldest token)."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        if e["versions"]:
            out[min(e["versions"])].append(e)
    return {v: rate(eps, flag) for v, eps in sorted(out.items())}


def measure(run_dir: Path, add_at: int, watch: Watch, settle: int = 0) -> dict[str, Any]:
    """One run's windows, per-version rates and the evidence of the add, from its files."""
    episodes = read_episodes(run_dir)
    metrics = read_metrics(run_dir)
    windows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        window = window_of(e, add_at, settle)
        if window is not None:
            windows[window].append(e)
    with_component = [e for e in episodes if watch.component in e["components"]]
    events = [
        p.event.model_dump()
        for p in recent(run_dir, count=100)
        if p.event.action == "add" and p.event.name == watch.reward_name
    ]
    return {
        "steps_trained": len(metrics),
        "add_step": add_step(metrics, watch),
        "add_events": events,
        "before": rate(windows["before"], watch.flag_key),
        "after": rate(windows["after"], watch.flag_key),
        "straddling_episodes": len(windows["straddling"]),
        "settling_episodes": len(windows["settling"]),
        "episodes": len(episodes),
        "episodes_with_component": len(with_component),
        "first_scored_with_component": min(
            (int(e["scored_after_step"]) for e in with_component), default=None
        ),
        "by_version": by_version(episodes, watch.flag_key),
    }


# --- the verdict ---------------------------------------------------------------------------


def fall(before: tuple[float, float], after: tuple[float, float]) -> tuple[float, float]:
    """(before - after, its standard error) of two independent windows' rates."""
    return before[0] - after[0], math.hypot(before[1], after[1])


def judge(
    with_reward: dict[str, Any], control: dict[str, Any] | None, add_at: int, settle: int = 0
) -> Verdict:
    """The verdict by the rule in the module docstring (`Verdict.held` stays False for
    *held in part*: the claim as stated, a fall beyond 3 standard errors, was not shown)."""
    before, after = with_reward["before"], with_reward["after"]
    windows = [before, after] + ([control["after"]] if control else [])
    if with_reward["add_step"] != add_at:
        return Verdict(
            "undecided",
            "no add",
            f"The reward was not added at step {add_at} (the run has no event).",
            f"rests on a run whose reward was added at step {add_at}",
        )
    if min(w["groups"] for w in windows) < MIN_GROUPS:
        return Verdict(
            "undecided",
            "too few groups",
            f"Fewer than {MIN_GROUPS} groups in a window: "
            + ", ".join(f"{w['groups']}" for w in windows)
            + " groups (before, after"
            + (", control after)." if control else ")."),
            f"rests on at least {MIN_GROUPS} groups in every window",
        )
    if before["flagged"] < MIN_FLAGGED:
        return Verdict(
            "undecided",
            "behaviour too rare",
            f"{before['flagged']} of {before['episodes']} episodes before the add were flagged "
            f"(fewer than {MIN_FLAGGED}): the policy does not show the behaviour at a rate "
            "whose fall could be measured.",
            f"rests on a policy that shows the behaviour ({MIN_FLAGGED} or more flagged "
            "episodes before the add)",
        )
    drop = fall(before["rate"], after["rate"])
    if not drop[1] > 0:
        return Verdict(
            "undecided",
            "zero standard error",
            "The difference has no spread.",
            "rests on windows whose rates vary",
        )
    z = drop[0] / drop[1]
    text = (
        f"The flagged rate fell from {_rate(before['rate'])} ({before['episodes']} episodes, "
        f"{before['groups']} groups, versions <= {add_at}) to {_rate(after['rate'])} "
        f"({after['episodes']} episodes, {after['groups']} groups, versions > "
        f"{add_at + settle}): "
        f"{format_se(*drop, sign=True)}, {z:.1f} standard errors."
    )
    strength = f"fall {format_se(*drop, sign=True)} ({z:.1f} s.e.)"
    zs = [z]
    if control is not None:
        against = fall(control["after"]["rate"], after["rate"])
        z_control = against[0] / against[1] if against[1] > 0 else math.nan
        text += (
            f" The control run without the add was at {_rate(control['after']['rate'])} over "
            f"the same versions: {format_se(*against, sign=True)} against it, "
            f"{z_control:.1f} standard errors."
        )
        strength += f", {z_control:.1f} s.e. below the control"
        if math.isnan(z_control):
            return Verdict(
                "undecided",
                strength,
                text + " The control has no spread.",
                "rests on a control run whose rate varies",
            )
        zs.append(z_control)
    if min(zs) > 3:
        return Verdict("held", strength, text)
    if min(zs) > 2:
        return Verdict(
            "held in part",
            strength,
            text,
            "the rate fell beyond 2 standard errors"
            + (" and below the control's" if control is not None else "")
            + ", not beyond the 3 the claim's rule asks",
        )
    return Verdict("did not hold", strength, text)


def _rate(pair: tuple[float, float]) -> str:
    return format_se(*pair, digits=3)


# --- the figure and the study --------------------------------------------------------------


def _figure(runs: dict[str, dict[str, Any]], sizes: Sizes, watch: Watch) -> Figure:
    add_at = sizes.add_at
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label in zip(
        axes,
        ("rate", "solved"),
        (f"share of episodes flagged {watch.behaviour}", "solve rate"),
        strict=True,
    ):
        top = 0.05
        for name, result in runs.items():
            series = result["by_version"]
            versions = sorted(series)
            means = [series[v][key][0] for v in versions]
            errors = [0.0 if math.isnan(s) else s for s in (series[v][key][1] for v in versions)]
            ax.errorbar(versions, means, yerr=errors, fmt="o-", capsize=3, markersize=3, label=name)
            top = max([top, *(m + e for m, e in zip(means, errors, strict=True))])
        # Between version add_at (the last trained without the reward) and the next one.
        ax.axvline(add_at + 0.5, color="black", linestyle="--", linewidth=1)
        ax.text(
            add_at + 0.5,
            0.98,
            f" {watch.reward_name} added at step {add_at}",
            transform=ax.get_xaxis_transform(),
            va="top",
            fontsize=8,
        )
        if sizes.settle:
            ax.axvspan(
                add_at + 0.5,
                add_at + sizes.settle + 0.5,
                color="grey",
                alpha=0.12,
                label="settling (in neither window)",
            )
        ax.set_ylim(0, min(1.0, top * 1.15))
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set(xlabel="policy version that started the episode (steps trained)", ylabel=label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8)
    axes[0].set_title(f"{watch.behaviour} by version (± s.e. over groups)")
    axes[1].set_title("solve rate by version (± s.e. over groups)")
    fig.suptitle(
        f"behaviour-reward ({watch.behaviour}): the {watch.reward_name} reward added to the "
        f"running job at step {add_at}"
    )
    fig.tight_layout()
    return fig


def run_dirs(work: Path, watch: Watch) -> dict[str, Path]:
    """Where each run of the study of `watch` goes under the work directory."""
    return {name: work / watch.behaviour / name for name in RUNS}


def run(options: StudyOptions) -> StudyOutcome:
    sizes = QUICK if options.quick else FULL
    watch = WATCHES[options.behaviour]
    names = [n for n in RUNS if n == "with-reward" or sizes.control]
    with tempfile.TemporaryDirectory(prefix="study-behaviour-") as tmp:
        work = options.work_dir or Path(tmp)
        base: dict[str, object] = {}
        model = options.checkpoint
        if model is None:
            model = random_checkpoint(work / "random-policy", seed=options.seed)
            base = dict(QUICK_RL_SETTINGS)
        dirs = run_dirs(work, watch)
        reused = [
            name
            for name in names
            if train(model, dirs[name], sizes, base, options.seed, watch, add=name == "with-reward")
        ]
        runs = {name: measure(dirs[name], sizes.add_at, watch, sizes.settle) for name in names}
    verdict = judge(runs["with-reward"], runs.get("control"), sizes.add_at, sizes.settle)
    rows = []
    for name, result in runs.items():
        after = f"> {sizes.add_at + sizes.settle}"
        for window, versions in (("before", f"0-{sizes.add_at}"), ("after", after)):
            w = result[window]
            rows.append(
                [
                    name,
                    window,
                    versions,
                    f"{w['groups']} / {w['episodes']}",
                    str(w["flagged"]),
                    _rate(w["rate"]),
                    _rate(w["solved"]),
                ]
            )
    main = runs["with-reward"]
    notes = [
        f"Behaviour `{watch.behaviour}` (monitor `{watch.monitor}`, flag key `{watch.flag_key}`): "
        f"{watch.description}. Reward `{watch.reward_name}` ({watch.reward_spec}, component "
        f"`{watch.component}`), blocked at the start and added with `composer-rl "
        f"{' '.join(add_command(Path('RUN_DIR'), watch))}` after step {sizes.add_at - 1}; the "
        f"run recorded the add at step {main['add_step']}.",
        f"Episodes scored after the add carry `{watch.component}`: "
        f"{main['episodes_with_component']} of {main['episodes']}, the first scored after "
        f"step {main['first_scored_with_component']}. "
        f"Left out as straddling the add (tokens from both sides): "
        + ", ".join(f"{n} {r['straddling_episodes']}" for n, r in runs.items())
        + f"; as settling (started by versions {sizes.add_at + 1}-{sizes.add_at + sizes.settle}, "
        "the reward's time to act): "
        + ", ".join(f"{n} {r['settling_episodes']}" for n, r in runs.items())
        + ".",
        "Rates are flagged episodes / episodes in the window; ± is the cluster-robust standard "
        "error over groups (a group: the G episodes of one task). Windows by the policy "
        "version that sampled every token of the episode.",
        f"Each run: {sizes.steps} steps x {sizes.groups_per_step} groups x {sizes.group_size} "
        "episodes, same seed, hard-task upsampling and evaluations off, services in one "
        "process" + ("; `control` is the same run without the add." if sizes.control else "."),
    ]
    if reused:
        notes.append(
            f"Reused finished runs from --work-dir (not rerun): {', '.join(reused)}; the "
            "wall-clock below is this command's, not theirs."
        )
    if options.checkpoint is None:
        notes.append(RANDOM_POLICY_NOTE)
    return StudyOutcome(
        columns=[
            "run",
            "window",
            "policy versions",
            "groups / episodes",
            "flagged",
            f"{watch.behaviour} rate",
            "solve rate",
        ],
        rows=rows,
        figure=_figure(runs, sizes, watch),
        verdict=verdict,
        numbers={
            "sizes": asdict(sizes),
            "checkpoint": str(options.checkpoint) if options.checkpoint else None,
            "behaviour": watch.behaviour,
            "flag": watch.flag_key,
            "monitor": watch.monitor,
            "reward": {
                "name": watch.reward_name,
                "spec": watch.reward_spec,
                "component": watch.component,
            },
            "add_command": ["composer-rl", *add_command(dirs["with-reward"], watch)],
            "work_dir": str(options.work_dir) if options.work_dir else None,
            "verdict_rule": {
                "min_groups": MIN_GROUPS,
                "min_flagged": MIN_FLAGGED,
                "held_z": 3,
                "in_part_z": 2,
            },
            "runs": runs,
            "reused_runs": reused,
        },
        notes=notes,
    )
