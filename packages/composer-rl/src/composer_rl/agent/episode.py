"""The episode runner: an InferenceEngine driving tool calls in composer-infra sandboxes.

Many episodes run at once. Each turn of each episode is one engine request (the whole
context so far, stopping at `<|/tool_call|>` or the end of the turn); the engine batches
the requests of every live episode (continuous batching). Each episode is an engine session
(`RunnerConfig.reuse_cache`, on by default): the engine keeps the episode's cache between its
turns, so a turn computes only the tool result and what it generates instead of re-filling
the whole context; the tokens, logprobs, versions and expert indices of every turn are those
a fresh prefill would give. The sandboxes run the calls
and, at the end, the hidden tests in a thread pool so grading overlaps with decoding.
An episode ends when the model calls `finish`, writes no call, runs out of turns, or its
context would overflow.
"""

from __future__ import annotations

import difflib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from composer_infra.sandbox import Sandbox, TestReport
from composer_model import ComposerTokenizer, InferenceEngine, SamplingParams
from composer_rewards import Episode, Message, TestResults, TokenCounts
from composer_rewards import ToolCall as EpisodeToolCall
from composer_rl.agent.format import (
    END_OF_TURN,
    TOOL_CALL_END,
    ToolCall,
    parse_output,
)
from composer_rl.agent.sandboxes import grade_sandbox, open_sandbox, workspace_files
from composer_rl.agent.transcript import Segment, Transcript, count_tokens, tool_output_text
from composer_rl.tasks.model import Task


@dataclass
class CallRecord:
    call: ToolCall
    ok: bool
    output: str
    error: str | None
    turn: int


@dataclass
class EpisodeResult:
    task: Task
    sample: int
    transcript: Transcript
    calls: list[CallRecord] = field(default_factory=list)
    finished: bool = False
    final_message: str = ""
    stop_reason: str = ""
    generated_tokens: int = 0
    report: TestReport | None = None
    files_after: dict[str, str] = field(default_factory=dict)

    @property
    def solved(self) -> bool:
        return bool(self.report and self.report.all_passed)

    @property
    def malformed_calls(self) -> int:
        return sum(1 for c in self.calls if not c.call.ok)


@dataclass
class RunnerConfig:
    max_turns: int = 8
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    backend: str | None = None
    grading_workers: int = 4
    # Keep each episode's inference cache between its turns (an engine session per episode).
    reuse_cache: bool = True


@dataclass
class _Live:
    result: EpisodeResult
    sandbox: Sandbox
    ids: list[int]
    session: str
    turns: int = 0


def unified_diff(before: dict[str, str], after: dict[str, str]) -> str:
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        chunks += difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
    return "".join(chunks)


class EpisodeRunner:
    def __init__(
        self, engine: InferenceEngine, tokenizer: ComposerTokenizer, config: RunnerConfig
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        special = tokenizer.special_ids
        self.stop_ids = [special[t] for t in (TOOL_CALL_END, END_OF_TURN, "<|endoftext|>")]

    def _params(self, live: _Live, request_seed: int) -> SamplingParams | None:
        room = self.engine.max_seq_len - len(live.ids) - 1
        if room < 8:
            return None
        return SamplingParams(
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            max_new_tokens=min(self.config.max_new_tokens, room),
            stop_token_ids=self.stop_ids,
            seed=request_seed,
        )

    def run(self, tasks: list[Task], samples_per_task: int = 1) -> list[EpisodeResult]:
        """Run `samples_per_task` episodes of every task; results in (task, sample) order."""
        pending = [(t, s) for t in tasks for s in range(samples_per_task)]
        pending.reverse()
        live: dict[str, _Live] = {}
        grading: list[tuple[EpisodeResult, Future[tuple[TestReport, dict[str, str]]]]] = []
        done: list[EpisodeResult] = []
        counter = 0
        with ThreadPoolExecutor(self.config.grading_workers) as pool:

            def finish(state: _Live, reason: str) -> None:
                self.engine.end_session(state.session)
                state.result.stop_reason = reason
                task, sandbox = state.result.task, state.sandbox

                def grade() -> tuple[TestReport, dict[str, str]]:
                    try:
                        return grade_sandbox(sandbox, task), workspace_files(sandbox, task)
                    finally:
                        sandbox.close()

                grading.append((state.result, pool.submit(grade)))

            def submit(state: _Live) -> None:
                nonlocal counter
                counter += 1
                params = self._params(state, self.config.seed * 1_000_003 + counter)
                if params is None:
                    finish(state, "context")
                    return
                session = state.session if self.config.reuse_cache else None
                request_id = self.engine.add_request(state.ids, params, session=session)
                live[request_id] = state

            while pending or live:
                while pending and len(live) < self.engine.max_batch_size:
                    task, sample = pending.pop()
                    transcript = Transcript.start(task.instruction)
                    state = _Live(
                        EpisodeResult(task=task, sample=sample, transcript=transcript),
                        open_sandbox(task, self.config.backend),
                        transcript.encode(self.tokenizer)[0],
                        session=f"episode-{id(self)}-{task.id}-{sample}",
                    )
                    submit(state)
                if not live:
                    continue
                for generation in self.engine.step():
                    state = live.pop(generation.request_id)
                    self._advance(state, generation.token_ids, submit, finish)
        for result, future in grading:
            result.report, result.files_after = future.result()
            done.append(result)
        order = {
            (t.id, s): i
            for i, (t, s) in enumerate((t, s) for t in tasks for s in range(samples_per_task))
        }
        return sorted(done, key=lambda r: order[(r.task.id, r.sample)])

    def _advance(self, state: _Live, token_ids: list[int], submit: Any, finish: Any) -> None:
        result = state.result
        text = self.tokenizer.decode(token_ids)
        result.generated_tokens += len(token_ids)
        result.transcript.segments.append(Segment("tool_call", text))
        state.ids += token_ids
        state.turns += 1
        parsed = parse_output(text)
        complete = text.endswith(TOOL_CALL_END)
        if not parsed.calls:
            finish(state, "no_call" if not parsed.finished_turn else "end_of_turn")
            return
        call = parsed.calls[0]
        if not complete or not call.ok:
            error = call.error or "incomplete tool call"
            record = CallRecord(call, False, "", f"malformed tool call: {error}", state.turns)
        else:
            answer = state.sandbox.call(call.name, dict(call.arguments))
            record = CallRecord(call, answer.ok, answer.output, answer.error, state.turns)
        result.calls.append(record)
        if call.name == "finish" and record.ok:
            result.finished = True
            result.final_message = str(call.arguments.get("message", ""))
            finish(state, "finish")
            return
        if not complete:
            finish(state, "length")
            return
        output = result.transcript
        output.add_result(tool_output_text(record.ok, record.output, record.error))
        state.ids += self.tokenizer.encode(output.segments[-1].text)
        if state.turns >= self.config.max_turns:
            finish(state, "max_turns")
            return
        submit(state)


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
                if render.kind == "tool_call"
            ),
        ),
        tool_calls=tuple(
            EpisodeToolCall(
                name=c.call.name,
                arguments=dict(c.call.arguments),
                ok=c.ok,
                output=c.output,
                error=c.error,
                malformed=not c.call.ok,
                turn=c.turn,
            )
            for c in result.calls
        ),
        final_message=result.final_message,
        diff=unified_diff(before, after),
        changed_files=changed,
        test_results=tests,
        tokens=TokenCounts(
            tool_call=counts["tool_call"],
            tool_output=counts["tool_output"],
            final_message=counts["final_message"],
        ),
        metadata={"task_id": result.task.id, "stop_reason": result.stop_reason},
    )
