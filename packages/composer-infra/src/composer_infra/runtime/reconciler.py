"""Keep a fixed number of rollout slots full of futures; reconcile each as it finishes.

There is no global barrier: the moment one rollout finishes (or fails), its result is
handed on and the freed slot gets the next item, while the others keep running. This is
the "futures everywhere" shape of the Composer report's orchestrator.

Failures: when the actor running an item dies (a crash, OOM kill, ``ray.kill``), Ray
restarts it (``max_restarts``) and the reconciler resubmits the item, to the next live
worker. The service is expected to resume from the item's last rollout checkpoint
(`composer_infra.checkpoint.RolloutStore`), so the work done before the crash is kept.
A worker that fails `max_worker_failures` times in a row is taken out of rotation; an
item that fails `max_attempts` times is reported as failed.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

log = logging.getLogger(__name__)


class RolloutFailed(RuntimeError):
    """An item failed `max_attempts` times, or no worker is left to run it."""


@dataclass
class ReconcilerStats:
    submitted: int = 0
    completed: int = 0
    retried: int = 0
    actor_failures: int = 0
    task_errors: int = 0
    max_in_flight: int = 0
    completion_order: list[str] = field(default_factory=list)


@dataclass
class _InFlight:
    item_id: str
    payload: Any
    worker: int
    attempt: int


class SlotReconciler:
    """Runs ``worker.<method>.remote(item_id, payload)`` for every item, `slots` at a time."""

    def __init__(
        self,
        workers: list[ActorHandle],
        *,
        method: str,
        slots: int,
        max_attempts: int = 5,
        max_worker_failures: int = 5,
    ) -> None:
        if not workers:
            raise ValueError("SlotReconciler needs at least one worker actor")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.workers = list(workers)
        self.method = method
        self.slots = slots
        self.max_attempts = max_attempts
        self.max_worker_failures = max_worker_failures
        self.stats = ReconcilerStats()
        self._in_flight: dict[Any, _InFlight] = {}
        self._retry: deque[tuple[str, Any, int]] = deque()
        self._failures = [0] * len(workers)
        self._retired: set[int] = set()
        # Workers whose actor died: out of rotation until a probe call answers.
        self._probes: dict[Any, int] = {}
        self._suspended: set[int] = set()
        self._next_worker = itertools.cycle(range(len(workers)))

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def _pick_worker(self) -> int:
        """The live worker with the fewest items in flight (ties go round the ring).

        Actors run one call at a time, so piling work on a busy one would stall a slot
        behind a long rollout while another worker sits idle.
        """
        live = [
            i
            for i in range(len(self.workers))
            if i not in self._retired and i not in self._suspended
        ]
        if not live:
            raise RolloutFailed("every worker has been retired after repeated failures")
        load = {i: 0 for i in live}
        for job in self._in_flight.values():
            if job.worker in load:
                load[job.worker] += 1
        start = next(self._next_worker)
        ring = sorted(live, key=lambda i: (i - start) % len(self.workers))
        return min(ring, key=lambda i: load[i])

    def _submit(self, item_id: str, payload: Any, attempt: int) -> None:
        index = self._pick_worker()
        ref = getattr(self.workers[index], self.method).remote(item_id, payload)
        self._in_flight[ref] = _InFlight(item_id, payload, index, attempt)
        self.stats.submitted += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, len(self._in_flight))

    def _fill(self, source: Iterator[tuple[str, Any]]) -> None:
        while len(self._in_flight) < self.slots:
            if len(self._suspended) + len(self._retired) == len(self.workers):
                return  # every worker is restarting (or retired): wait for a probe
            if self._retry:
                self._submit(*self._retry.popleft())
                continue
            try:
                item_id, payload = next(source)
            except StopIteration:
                return
            self._submit(item_id, payload, 1)

    def _reconcile(self, ref: Any, on_result: Callable[[str, Any], None]) -> None:
        job = self._in_flight.pop(ref)
        try:
            result = ray.get(ref)
        except RayActorError as error:
            self.stats.actor_failures += 1
            self._worker_failed(job.worker)
            self._requeue(job, f"worker {job.worker} died: {type(error).__name__}")
            return
        except RayTaskError as error:
            self.stats.task_errors += 1
            self._requeue(job, f"raised {error.cause!r}")
            return
        self._failures[job.worker] = 0
        self.stats.completed += 1
        self.stats.completion_order.append(job.item_id)
        on_result(job.item_id, result)

    def _worker_failed(self, worker: int) -> None:
        """Take a worker whose actor died out of rotation; probe it until Ray restarts it."""
        self._failures[worker] += 1
        if self._failures[worker] >= self.max_worker_failures:
            log.error("retiring worker %d after %d failures", worker, self._failures[worker])
            self._retired.add(worker)
            self._suspended.discard(worker)
            return
        if worker not in self._suspended:
            self._suspended.add(worker)
            self._probe(worker)

    def _probe(self, worker: int) -> None:
        self._probes[self.workers[worker].__ray_ready__.remote()] = worker

    def _reconcile_probe(self, ref: Any) -> None:
        worker = self._probes.pop(ref)
        try:
            ray.get(ref)
        except ActorUnavailableError:
            time.sleep(0.2)  # still restarting: ask again shortly
            self._probe(worker)
            return
        except RayActorError:
            self._suspended.discard(worker)
            self._worker_failed(worker)  # counts towards retirement; probes again if not retired
            return
        log.info("worker %d is back", worker)
        self._suspended.discard(worker)

    def _requeue(self, job: _InFlight, why: str) -> None:
        if job.attempt >= self.max_attempts:
            raise RolloutFailed(f"item {job.item_id!r} failed {job.attempt} times; last: {why}")
        log.warning("item %s attempt %d failed (%s); retrying", job.item_id, job.attempt, why)
        self.stats.retried += 1
        self._retry.append((job.item_id, job.payload, job.attempt + 1))

    def run(
        self,
        items: Iterable[tuple[str, Any]],
        on_result: Callable[[str, Any], None],
        *,
        poll_s: float = 1.0,
    ) -> ReconcilerStats:
        """Run every item to completion; `on_result(item_id, result)` as each one finishes."""
        source = iter(items)
        self._fill(source)
        while self._in_flight or self._retry:
            waiting = [*self._in_flight, *self._probes]
            if not waiting:
                raise RolloutFailed("items remain but every worker has been retired")
            ready, _ = ray.wait(waiting, num_returns=1, timeout=poll_s)
            for ref in ready:
                if ref in self._probes:
                    self._reconcile_probe(ref)
                else:
                    self._reconcile(ref, on_result)
            self._fill(source)
        return self.stats


__all__ = ["ReconcilerStats", "RolloutFailed", "SlotReconciler"]
