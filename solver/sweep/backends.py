"""Where the sizes of a sweep run: a local pool of worker processes, a Ray cluster, or this process.

Every backend turns a job into a `concurrent.futures.Future` and can stop a running one; `run_jobs`
keeps `width` sizes running, collects each result as it arrives, stops a size that outlives its
deadline (status `timeout`) and turns a lost worker into status `failed`, so one size never blocks or
loses the others. The local pool is one single-process executor per slot: stopping or losing a worker
touches only the size it was running, and the slot's process is reused by the next size (so the
solver's imports are paid once per slot, not once per size).
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

from parasol.errors import InputError
from parasol.solver.search.halves import available_cores
from parasol.solver.sweep.jobs import SizeJob, SizeResult, check_backend, failed_size

Task = Callable[[SizeJob], SizeResult]

START_METHOD = "forkserver"
"""Workers fork from a server process that has imported the solver once (PRELOAD) and started no
OR-Tools threads: each slot starts in about 0.1 s instead of re-importing (about 1 s with `spawn`)."""

PRELOAD = ("parasol.solver.sweep.jobs", "parasol.solver.search.solve", "parasol.solver.diagnose.repairs",
           "parasol.constraints.physics.step_time")


class Pool(Protocol):
    """What `run_jobs` needs from a backend."""

    width: int

    def submit(self, job: SizeJob) -> Future:
        """Start the job; its result arrives through the future."""

    def finished(self, future: Future) -> None:
        """The job's future is done: release what ran it."""

    def stop(self, future: Future) -> None:
        """Stop a running job at once."""


# --- this process ----------------------------------------------------------------------------------


@dataclass
class SerialPool:
    """Run each size in this process as it is submitted (no deadline can stop it: the solver's own
    time limit still applies). The reference for what the parallel backends must return."""

    task: Task
    width: int = 1

    def submit(self, job: SizeJob) -> Future:
        """Run the job now; return its already finished future."""
        future: Future = Future()
        future.set_result(self.task(job))
        return future

    def finished(self, future: Future) -> None:
        """Nothing to release."""

    def stop(self, future: Future) -> None:
        """A finished future has nothing to stop."""


# --- local worker processes -------------------------------------------------------------------------


@dataclass
class _Slot:
    """One worker process (a single-process executor) and the future of its process id."""

    executor: ProcessPoolExecutor
    pid: Future

    @classmethod
    def start(cls, context: Any) -> _Slot:
        """A fresh worker; its pid is asked first, so it is known before any job runs there."""
        executor = ProcessPoolExecutor(max_workers=1, mp_context=context)
        return cls(executor=executor, pid=executor.submit(os.getpid))

    def kill(self) -> None:
        """Stop the worker at once (a size past its deadline) and release the executor."""
        if self.pid.done() and not self.pid.exception():
            with suppress(ProcessLookupError):
                os.kill(self.pid.result(), signal.SIGKILL)
        self.executor.shutdown(wait=False, cancel_futures=True)


@dataclass
class LocalPool:
    """`width` worker processes on this machine, one size at a time each."""

    task: Task
    width: int
    context: Any = None
    _idle: list[_Slot] = field(default_factory=list)
    _busy: dict[Future, _Slot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Start the workers (forked from a server that imported the solver once)."""
        import multiprocessing

        self.context = multiprocessing.get_context(START_METHOD)
        self.context.set_forkserver_preload(list(PRELOAD))
        self._idle = [_Slot.start(self.context) for _ in range(self.width)]

    def submit(self, job: SizeJob) -> Future:
        """Run the job on an idle worker."""
        slot = self._idle.pop()
        future = slot.executor.submit(self.task, job)
        self._busy[future] = slot
        return future

    def finished(self, future: Future) -> None:
        """The worker is idle again; one that died is replaced."""
        slot = self._busy.pop(future)
        if future.exception() is not None:
            slot.kill()
            slot = _Slot.start(self.context)
        self._idle.append(slot)

    def stop(self, future: Future) -> None:
        """Kill the worker running `future` and put a fresh one in its place."""
        slot = self._busy.pop(future)
        slot.kill()
        self._idle.append(_Slot.start(self.context))

    def close(self) -> None:
        """Shut the idle workers down; kill any still running (the sweep was interrupted)."""
        for slot in self._idle:
            slot.executor.shutdown(wait=True, cancel_futures=True)
        for slot in self._busy.values():
            slot.kill()


# --- Ray ---------------------------------------------------------------------------------------------


@dataclass
class RayPool:
    """Each size as a Ray task (one CPU, no retries) on a running cluster or a local Ray started here;
    at most as many at a time as the cluster has CPUs, so a size's deadline counts from its start."""

    task: Task
    workers: int | None
    sizes: int
    address: str | None = None
    width: int = 1
    _owner: bool = False
    _refs: dict[Future, Any] = field(default_factory=dict)
    _remote: Any = None

    def __post_init__(self) -> None:
        """Join the running Ray (or the cluster at `address`, or start a local one) and size the pool."""
        import ray

        if not ray.is_initialized():
            options: dict = {"address": self.address} if self.address else {"num_cpus": self.workers or available_cores()}
            ray.init(include_dashboard=False, log_to_driver=False, **options)
            self._owner = True
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.width = max(1, min(self.workers or cpus, cpus, self.sizes))
        self._remote = ray.remote(num_cpus=1, max_retries=0)(self.task)

    def submit(self, job: SizeJob) -> Future:
        """Submit the job as a Ray task; its object reference as a future."""
        ref = self._remote.remote(job)
        future = ref.future()
        self._refs[future] = ref
        return future

    def finished(self, future: Future) -> None:
        """Forget the task."""
        self._refs.pop(future, None)

    def stop(self, future: Future) -> None:
        """Cancel the task, killing its worker."""
        import ray

        ray.cancel(self._refs.pop(future), force=True)

    def close(self) -> None:
        """Shut down the Ray instance this pool started (a cluster it joined keeps running)."""
        import ray

        if self._owner:
            ray.shutdown()


def _ray_missing() -> InputError:
    """Ray is an optional extra: say how to install it."""
    return InputError("The Ray backend needs the `ray` package.", field="--backend", value="ray",
                      expected="ray installed (the optional extra of parasol)",
                      fix="pip install 'parasol[ray]', or use --backend local.")


@contextmanager
def open_pool(backend: str, task: Task, workers: int | None, sizes: int,
              ray_address: str | None = None) -> Iterator[Pool]:
    """The backend's pool, `workers` wide (default: the cores here, or the Ray cluster's CPUs; never
    more than the sizes, nor than the cluster's CPUs), closed on exit."""
    check_backend(backend)
    if backend == "serial":
        yield SerialPool(task)
        return
    if backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise _ray_missing() from None
        pool: LocalPool | RayPool = RayPool(task, workers, sizes, ray_address)
    else:
        pool = LocalPool(task, min(workers or available_cores(), sizes))
    try:
        yield pool
    finally:
        pool.close()


def _outcome(future: Future, job: SizeJob, seconds: float) -> SizeResult:
    """A finished future's result, or `failed` with the reason when its worker was lost."""
    exc = future.exception()
    if exc is None:
        return future.result()
    return failed_size(job, "failed", f"the worker running this size stopped ({type(exc).__name__}: {exc})",
                       seconds)


def run_jobs(jobs: Sequence[SizeJob], pool: Pool, deadline_s: float,
             progress: Callable[[SizeResult], None] | None = None) -> list[SizeResult]:
    """Run every job on `pool`, `pool.width` at a time; a job still running `deadline_s` after it
    started is stopped and reported as `timeout`. Results in completion order."""
    waiting = deque(jobs)
    running: dict[Future, tuple[SizeJob, float]] = {}
    results: list[SizeResult] = []

    def record(result: SizeResult) -> None:
        """Keep a result and report it."""
        results.append(result)
        if progress:
            progress(result)

    while waiting or running:
        while waiting and len(running) < pool.width:
            job = waiting.popleft()
            running[pool.submit(job)] = (job, time.monotonic())
        next_deadline = min(started + deadline_s for _, started in running.values())
        done, _ = wait(running, timeout=max(0.0, next_deadline - time.monotonic()), return_when=FIRST_COMPLETED)
        for future in done:
            job, started = running.pop(future)
            pool.finished(future)
            record(_outcome(future, job, time.monotonic() - started))
        now = time.monotonic()
        for future, (job, started) in list(running.items()):
            if not future.done() and now - started >= deadline_s:
                del running[future]
                pool.stop(future)
                record(failed_size(job, "timeout", f"no answer within {deadline_s:g} s of starting; the size "
                                   "was stopped", now - started))
    return results
