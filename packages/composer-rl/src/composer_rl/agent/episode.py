"""The episode runner: an InferenceEngine driving tool calls in composer-infra sandboxes.

Many episodes run at once. Each turn of each episode is one engine request (the whole
context so far, stopping at `<|/tool_call|>` or the end of the turn); the engine batches
the requests of every live episode (continuous batching). Each episode is an engine session
(`RunnerConfig.reuse_cache`, on by default): the engine keeps the episode's cache between its
turns, so a turn computes only the tool result and what it generates instead of re-filling
the whole context; the tokens, logprobs, versions and expert indices of every turn are those
a fresh prefill would give. The sandboxes run the calls and, at the end, the hidden tests
in a thread pool so grading overlaps with decoding. An episode ends when the model calls
`finish`, writes no call, runs out of turns, or its context would overflow; with a
`SummaryConfig` it summarizes instead of overflowing, or (the baseline `mode="truncate"`)
drops its oldest turns (`composer_rl.agent.summarize`).

The runner reaches sandboxes only through `composer_rl.agent.sandboxes.Sandboxes`, so the
same loop serves sandboxes in its own process (the default) and the environment service's on
another node (a Ray run), where the engine's process never holds a sandbox.

Every episode records a `Trajectory` per segment (composer-infra's, the one trajectory type
from the engine to the trainer): exactly the tokens the engine saw, which of them the policy
sampled, their behaviour logprobs, policy versions and expert indices. The RL loop scores,
persists and trains on those very objects, never on re-tokenized text or a copy. Episodes
can be run as a batch (`run`, evaluation) or as a stream (`submit` / `poll`, the RL loop's
rollout slots).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from composer_infra.checkpoint import Trajectory
from composer_infra.sandbox import BackendRegistry, TestReport
from composer_model import ComposerTokenizer, GenerationResult, InferenceEngine, SamplingParams
from composer_rewards import Episode, Message, TestResults, TokenCounts, ToolCall
from composer_rewards.episode import COMPACTIONS_KEY
from composer_rl.agent.format import (
    END_OF_TURN,
    TOOL_CALL_END,
    parse_output,
    render_prompt,
)
from composer_rl.agent.sandboxes import LocalSandboxes, Sandboxes, SandboxHandle, unified_diff
from composer_rl.agent.summarize import (
    SUMMARY_REQUEST,
    SummaryConfig,
    condensed_prompt,
    should_summarize,
    summary_text,
    truncation_start,
)
from composer_rl.agent.transcript import Segment, Transcript, count_tokens, tool_output_text
from composer_rl.tasks.model import Task


@dataclass
class EpisodeResult:
    task: Task
    sample: int
    transcript: Transcript
    calls: list[ToolCall] = field(default_factory=list)  # as parsed, with the answer and turn
    finished: bool = False
    final_message: str = ""
    stop_reason: str = ""
    generated_tokens: int = 0
    report: TestReport | None = None
    files_after: dict[str, str] = field(default_factory=dict)
    record: Trajectory = field(default_factory=Trajectory)
    grading_error: str | None = None  # the grader failed (infrastructure): no reward
    key: str = ""  # the submitter's label (the RL loop's group id)
    sandbox_seconds: float = 0.0  # tool calls and grading, wall-clock
    segments: list[Trajectory] = field(default_factory=list)  # closed by compactions
    summaries: list[str] = field(default_factory=list)
    # What each compaction carried into the condensed context beyond the task: the summary,
    # or the kept turns of a truncation (decoded), in order.
    compactions: list[str] = field(default_factory=list)
    # The turn after which each compaction happened: calls of later turns no longer see the
    # tool results before it (the `redundant_reads` reward forgets those reads).
    compacted_after_turns: list[int] = field(default_factory=list)

    @property
    def records(self) -> list[Trajectory]:
        """Every segment's trajectory, in order (one unless the episode's context was condensed)."""
        return [*self.segments, self.record]

    @property
    def solved(self) -> bool:
        return bool(self.report and self.report.all_passed)

    @property
    def malformed_calls(self) -> int:
        return sum(1 for c in self.calls if c.malformed)


def record_generation(record: Trajectory, generation: GenerationResult) -> None:
    """Append one engine answer to the segment's trajectory: its tokens as sampled, and the
    routing of the tokens this request processed first (earlier ones were routed by the
    request that first saw them; the engine's rows start at the context's first token)."""
    routing = generation.routing
    rows = None if routing is None else routing[record.routed_prefix :].tolist()
    record.add_sampled(generation.token_ids, generation.logprobs, generation.versions, rows)


MAX_TURNS = 20
"""Every runner's default turn limit. The longest demonstration found makes 19 tool calls (a
recovering one of `prints_to_logging` that opens with a missing file), and a runner that
cuts what SFT demonstrated stops the policy on the way to the solution it was shown: at 10
turns and 160 tokens, 1,070 of stage one's 4,263 SFT demonstrations could not be played
whole (docs/rl/2026-12-07-demonstration-limits.md; `tests/test_demonstration_limits.py`
holds every template's demonstrations to these limits)."""

MAX_TURN_TOKENS = 384
"""Every runner's default tokens a turn: the longest call among stage one's SFT
demonstrations is 321 tokens (stage one's tokenizer), with room for longer names."""


class RunnerConfig(BaseModel):
    """How the episode runner plays episodes. The defaults are evaluation's (greedy, no
    summaries); RL's rollouts are a section of their own with theirs
    (`composer_rl.rl.config.RolloutConfig`: temperature 1, router replay's routing, self
    summaries)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int = Field(
        default=MAX_TURNS, ge=1, description="model turns (tool calls) before an episode is cut"
    )
    max_new_tokens: int = Field(
        default=MAX_TURN_TOKENS, ge=1, description="tokens one turn may generate"
    )
    temperature: float = Field(default=0.0, ge=0, description="sampling temperature (0: greedy)")
    top_p: float = Field(default=1.0, gt=0, le=1, description="nucleus sampling's mass")
    seed: int = Field(default=0, description="seed of the sampling (per episode and turn)")
    backend: str | None = Field(default=None, description="sandbox backend (none: bwrap)")
    grading_workers: int = Field(
        default=4, ge=1, description="sandboxes graded at once, beside the decoding"
    )
    record_routing: bool = Field(
        default=False, description="record each token's experts (router replay needs them)"
    )
    summary: SummaryConfig | None = Field(
        default=None,
        description="self-summarization (`composer_rl.agent.summarize`); none: an episode "
        "ends when its context is full",
    )
    reuse_cache: bool = Field(
        default=True,
        description="keep each episode's inference cache between its turns (an engine "
        "session per episode)",
    )


@dataclass
class _Live:
    result: EpisodeResult
    sandbox: SandboxHandle
    ids: list[int]
    session: str
    turns: int = 0
    summarizing: bool = False
    turn_starts: list[int] = field(default_factory=list)  # where each turn begins in `ids`


class EpisodeRunner:
    """Drives many episodes through one engine; a batch (`run`) or a stream (`submit`/`poll`).

    The stream is what the asynchronous RL loop uses: episodes are submitted as rollout
    slots free up and come back, graded, from `poll` while others are still decoding, so
    generation never waits for a whole batch. `run` is the same machinery driven until a
    fixed list is done (evaluation).
    """

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: ComposerTokenizer,
        config: RunnerConfig,
        backends: BackendRegistry | None = None,
        sandboxes: Sandboxes | None = None,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        # Where `config.backend` is looked up: the job's (`JobPlugins.backends`); None,
        # outside a job, is composer-infra's standalone default.
        self.backends = backends
        # Where episodes' sandboxes live: given by a Ray run (the environment service),
        # else in this process.
        self.sandboxes = sandboxes if sandboxes is not None else LocalSandboxes(backends)
        special = tokenizer.special_ids
        self.stop_ids = [special[t] for t in (TOOL_CALL_END, END_OF_TURN, "<|endoftext|>")]
        self.summary_stop_ids = [special[t] for t in (END_OF_TURN, "<|endoftext|>")]
        self._pending: list[tuple[Task, int, str]] = []
        self._live: dict[str, _Live] = {}
        self._grading: list[tuple[EpisodeResult, Future[tuple[TestReport, dict[str, str]]]]] = []
        self._failed: list[EpisodeResult] = []
        self._counter = 0
        self._sessions = 0
        self._pool = ThreadPoolExecutor(config.grading_workers)

    def _params(self, live: _Live, request_seed: int) -> SamplingParams | None:
        room = self.engine.max_seq_len - len(live.ids) - 1
        if room < 8:
            return None
        wanted = self.config.max_new_tokens
        stops = self.stop_ids
        if live.summarizing and self.config.summary is not None:
            wanted, stops = self.config.summary.summary_tokens, self.summary_stop_ids
        return SamplingParams(
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            max_new_tokens=min(wanted, room),
            stop_token_ids=stops,
            seed=request_seed,
            return_routing=self.config.record_routing,
        )

    # --- the stream -----------------------------------------------------------------------

    def submit(self, task: Task, sample: int = 0, key: str = "") -> None:
        """Queue one episode; it starts when the engine has a free slot."""
        self._pending.append((task, sample, key))

    @property
    def in_flight(self) -> int:
        """Episodes submitted and not yet returned by `poll` (queued, decoding or grading)."""
        return len(self._pending) + len(self._live) + len(self._grading) + len(self._failed)

    def poll(self) -> list[EpisodeResult]:
        """Admit queued episodes, run one engine step, act on finished turns; return graded episodes."""
        while self._pending and len(self._live) < self.engine.max_batch_size:
            task, sample, key = self._pending.pop(0)
            transcript = Transcript.start(task.instruction)
            result = EpisodeResult(task=task, sample=sample, transcript=transcript)
            result.key = key
            ids = transcript.encode(self.tokenizer)[0]
            result.record.add_context(ids)
            try:
                sandbox = self.sandboxes.open(task, self.config.backend)
            except Exception as exc:  # infrastructure, not the policy: no reward, not a zero
                result.stop_reason = "sandbox_error"
                result.grading_error = f"sandbox did not open: {type(exc).__name__}: {exc}"
                self._failed.append(result)
                continue
            self._sessions += 1
            session = f"episode-{id(self)}-{self._sessions}"
            self._submit(_Live(result, sandbox, list(ids), session=session))
        if self._live:
            for generation in self.engine.step():
                state = self._live.pop(generation.request_id)
                self._advance(state, generation)
        return self._collect(block=not self._live and not self._pending)

    def _collect(self, block: bool) -> list[EpisodeResult]:
        done, self._failed = self._failed, []
        keep = []
        for result, future in self._grading:
            if block or future.done():
                try:
                    result.report, result.files_after = future.result()
                except Exception as exc:  # the grader failed, not the policy
                    result.grading_error = f"{type(exc).__name__}: {exc}"
                done.append(result)
            else:
                keep.append((result, future))
        self._grading = keep
        return done

    def close(self) -> None:
        """Abort what is still decoding, close its sandboxes, and wait for grading to end."""
        for request_id, state in list(self._live.items()):
            self.engine.abort(request_id)
            self.engine.end_session(state.session)
            state.sandbox.close()
        self._live.clear()
        self._pending.clear()
        self._pool.shutdown(wait=True)
        self._grading.clear()

    # --- the batch ------------------------------------------------------------------------

    def run(
        self,
        tasks: list[Task],
        samples_per_task: int = 1,
        on_episode: Callable[[int], None] | None = None,
    ) -> list[EpisodeResult]:
        """Run `samples_per_task` episodes of every task; results in (task, sample) order.
        `on_episode(n)` is called with the count of graded episodes as it grows (progress
        of a long scoring pass)."""
        for task in tasks:
            for sample in range(samples_per_task):
                self.submit(task, sample)
        done: list[EpisodeResult] = []
        while self.in_flight:
            graded = self.poll()
            done += graded
            if graded and on_episode is not None:
                on_episode(len(done))
        order = {
            (t.id, s): i
            for i, (t, s) in enumerate((t, s) for t in tasks for s in range(samples_per_task))
        }
        return sorted(done, key=lambda r: order[(r.task.id, r.sample)])

    # --- one episode ----------------------------------------------------------------------

    def _finish(self, state: _Live, reason: str) -> None:
        self.engine.end_session(state.session)
        state.result.stop_reason = reason
        task, sandbox = state.result.task, state.sandbox

        def grade() -> tuple[TestReport, dict[str, str]]:
            began = time.monotonic()
            try:
                return sandbox.grade(task)
            finally:
                sandbox.close()
                state.result.sandbox_seconds += time.monotonic() - began

        self._grading.append((state.result, self._pool.submit(grade)))

    def _submit(self, state: _Live) -> None:
        self._counter += 1
        params = self._params(state, self.config.seed * 1_000_003 + self._counter)
        if params is None:
            self._finish(state, "context")
            return
        session = state.session if self.config.reuse_cache else None
        request_id = self.engine.add_request(state.ids, params, session=session)
        self._live[request_id] = state

    def user_turn(self, result: EpisodeResult) -> str | None:
        """Text of a user turn to put into the context before the episode's next turn.

        None here; a subclass uses it to interrupt an episode with a new instruction (the
        interruption side evaluation). The text is context: never trained on.
        """
        return None

    def _summarize_or_submit(self, state: _Live) -> None:
        """Continue the episode: a user turn if one is due, then a summary if the next turn
        could overflow the context budget."""
        turn = self.user_turn(state.result)
        if turn:
            ids = self.tokenizer.encode(turn)
            state.ids += ids
            state.result.record.add_context(ids)
            state.result.transcript.segments.append(Segment("prompt", turn))
        done = len(state.result.compactions)
        summary = self.config.summary
        if should_summarize(len(state.ids), self.config.max_new_tokens, done, summary):
            if summary is not None and summary.mode == "truncate":
                assert summary.context_budget is not None  # should_summarize checked it
                self._truncate(state, summary.context_budget)
                self._submit(state)
                return
            request = self.tokenizer.encode(SUMMARY_REQUEST)
            state.ids += request
            state.result.record.add_context(request)
            state.result.transcript.segments.append(Segment("prompt", SUMMARY_REQUEST))
            state.summarizing = True
        self._submit(state)

    def _condense(self, state: _Live, generation: GenerationResult) -> None:
        """The summary came back: close this segment, continue from the condensed context."""
        result = state.result
        record_generation(result.record, generation)
        text = self.tokenizer.decode(generation.token_ids)
        result.generated_tokens += len(generation.token_ids)
        result.transcript.segments.append(Segment("summary", text))
        result.summaries.append(summary_text(text))
        result.compactions.append(result.summaries[-1])
        result.compacted_after_turns.append(state.turns)
        result.segments.append(result.record)
        result.record = Trajectory()
        prompt = condensed_prompt(
            result.task.instruction, result.summaries[-1], len(result.summaries)
        )
        result.transcript.segments.append(Segment("prompt", prompt))
        state.ids = self.tokenizer.encode(prompt)
        result.record.add_context(state.ids)
        state.turn_starts = []
        state.summarizing = False
        self._submit(state)

    def _truncate(self, state: _Live, budget: int) -> None:
        """Plain truncation (the self-summary study's baseline): close this segment and
        continue from the task's prompt and the most recent whole turns that leave room
        for the next one. The kept turns are context in the new segment, never trained twice."""
        result = state.result
        prompt = render_prompt(result.task.instruction)
        head = self.tokenizer.encode(prompt)
        room = budget - self.config.max_new_tokens - len(head)
        start = truncation_start(state.turn_starts, len(state.ids), room)
        kept = state.ids[start:]
        result.segments.append(result.record)
        result.record = Trajectory()
        result.compactions.append(self.tokenizer.decode(kept))
        result.compacted_after_turns.append(state.turns)
        result.transcript.segments.append(Segment("prompt", prompt + result.compactions[-1]))
        state.ids = head + kept
        result.record.add_context(state.ids)
        state.turn_starts = [len(head) + s - start for s in state.turn_starts if s >= start]

    def _advance(self, state: _Live, generation: GenerationResult) -> None:
        if state.summarizing:
            self._condense(state, generation)
            return
        result = state.result
        token_ids = generation.token_ids
        record_generation(result.record, generation)
        text = self.tokenizer.decode(token_ids)
        result.generated_tokens += len(token_ids)
        result.transcript.segments.append(Segment("tool_call", text))
        state.turn_starts.append(len(state.ids))
        state.ids += token_ids
        state.turns += 1
        parsed = parse_output(text)
        complete = text.endswith(TOOL_CALL_END)
        if not parsed.calls:
            self._finish(state, "no_call" if not parsed.finished_turn else "end_of_turn")
            return
        call = parsed.calls[0]
        if not complete or not call.ok:
            error = call.error or "incomplete tool call"
            answered = {"ok": False, "output": "", "error": f"malformed tool call: {error}"}
        else:
            began = time.monotonic()
            answer = state.sandbox.call(call.name, dict(call.arguments))
            result.sandbox_seconds += time.monotonic() - began
            answered = {"ok": answer.ok, "output": answer.output, "error": answer.error}
        record = call.model_copy(update={**answered, "turn": state.turns})
        result.calls.append(record)
        if call.name == "finish" and record.ok:
            result.finished = True
            result.final_message = str(call.arguments.get("message", ""))
            self._finish(state, "finish")
            return
        if not complete:
            self._finish(state, "length")
            return
        output = result.transcript
        output.add_result(tool_output_text(record.ok, record.output, record.error))
        appended = self.tokenizer.encode(output.segments[-1].text)
        state.ids += appended
        result.record.add_context(appended)
        if state.turns >= self.config.max_turns:
            self._finish(state, "max_turns")
            return
        self._summarize_or_submit(state)


def episode_view(result: EpisodeResult, tokenizer: ComposerTokenizer) -> Episode:
    """The torch-free view that reward and monitor plugins read."""
    counts = count_tokens(result.transcript.segments, tokenizer)
    report = result.report
    tests = (
        TestResults(
            passed=report.passed,
            failed=report.failed,
            errors=report.errors,
            outcomes=report.outcomes,
        )
        if report is not None
        else TestResults()
    )
    before = result.task.files
    after = result.files_after
    changed = {p: after.get(p) for p in set(before) | set(after) if before.get(p) != after.get(p)}
    return Episode(
        task=result.task.instruction,
        messages=(
            Message(role="user", content=result.task.instruction),
            *(
                Message(role="assistant", content=render.text)
                for render in result.transcript.segments
                if render.kind in ("tool_call", "summary")
            ),
        ),
        tool_calls=tuple(result.calls),
        final_message=result.final_message,
        diff=unified_diff(before, after),
        changed_files=changed,
        test_results=tests,
        tokens=TokenCounts(
            tool_call=counts["tool_call"],
            tool_output=counts["tool_output"],
            final_message=counts["final_message"],
        ),
        metadata={
            "task_id": result.task.id,
            "stop_reason": result.stop_reason,
            "grading_failure": report.failure_reason if report is not None else None,
            COMPACTIONS_KEY: list(result.compacted_after_turns),
        },
    )
