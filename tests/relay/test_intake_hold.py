"""The dispatch worker yields to a busy intake (crcr.queue.IntakeHold) and never starves."""

from __future__ import annotations

import asyncio
import threading

from huey import MemoryHuey

from crcr.queue import InProcessConsumer, IntakeHold, Wakeup, apply_wake_bytes
from relay.group_commit import BusyMeter, GroupWriter, Incoming
from relay.worker_process import PipeWakeup
from tests.relay.harness import make_settings, pr_payload


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_hold_lets_one_task_through_per_interval_while_busy_and_all_once_idle():
    clock = Clock()
    hold = IntakeHold(hold_s=0.25, every_s=0.5, clock=clock)
    assert hold.may_start() and hold.may_start()  # not busy: never waits
    hold.busy()
    clock.now += 0.5
    hold.busy()
    assert hold.may_start()  # the trickle: one start per interval even while busy
    assert not hold.may_start() and not hold.may_start()
    clock.now += 0.2
    hold.busy()  # still busy: the next start waits for the interval
    assert not hold.may_start()
    clock.now += 0.3
    hold.busy()
    assert hold.may_start() and not hold.may_start()
    clock.now += 0.25  # no busy() for hold_s: idle again
    assert hold.may_start() and hold.may_start()


def test_worker_leaves_tasks_queued_while_intake_is_busy_then_runs_them(tmp_path):
    clock = Clock()
    huey = MemoryHuey("hold", utc=True)
    wakeup = Wakeup()
    wakeup.hold = IntakeHold(hold_s=60, every_s=60, clock=clock)
    asked = threading.Semaphore(0)
    may_start = wakeup.hold.may_start

    def counting() -> bool:
        asked.release()
        return may_start()

    wakeup.hold.may_start = counting
    ran = threading.Event()
    task = huey.task()(ran.set)
    wakeup.hold.last_start = clock.now  # a task just started: the next one waits its turn
    wakeup.busy()
    task()
    consumer = InProcessConsumer(huey, wakeup=wakeup, workers=1, periodic=False, max_delay=0.05,
                                 initial_delay=0.01, check_worker_health=False)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        for _ in range(5):  # the worker asked five times and was held each time
            assert asked.acquire(timeout=30)
        assert not ran.is_set() and huey.pending_count() == 1
        clock.now += 61  # the burst is over
        assert ran.wait(30)
    finally:
        consumer.stop(graceful=True)
        thread.join(30)


def test_child_reads_busy_and_wake_bytes_from_the_pipe():
    class Recorder:
        def __init__(self) -> None:
            self.woken, self.busy_calls = 0, 0

        def notify(self, n: int = 1) -> None:
            self.woken += n

        def busy(self) -> None:
            self.busy_calls += 1

    rec = Recorder()
    apply_wake_bytes(b"wwbw", rec)
    apply_wake_bytes(b"b", rec)
    assert (rec.woken, rec.busy_calls) == (3, 2)


def test_pipe_wakeup_sends_busy_at_most_once_per_interval(tmp_path):
    import os

    clock = Clock()
    pipe = PipeWakeup(clock=clock)
    r, w = os.pipe()
    pipe.fd = w
    try:
        pipe.busy()
        pipe.busy()
        pipe.notify(2)
        clock.now += 2 * pipe.BUSY_EVERY_S
        pipe.busy()
        assert os.read(r, 100) == b"bwwb"
    finally:
        os.close(r)
        os.close(w)


def test_busy_meter_counts_deliveries_per_window():
    clock = Clock()
    meter = BusyMeter(threshold=20, window_s=0.1, clock=clock)
    assert not meter.add(10)
    assert meter.add(10)  # 20 within 0.1 s
    clock.now += 0.2
    assert not meter.add(1)  # a new window


def test_a_burst_of_webhooks_tells_the_worker_intake_is_busy(tmp_path):
    from crcr.store.migrate import upgrade
    from relay.runtime import Runtime

    class Recorder:
        busy_calls = 0

        def notify(self, n: int = 1) -> None:
            pass

        def busy(self) -> None:
            self.busy_calls += 1

    runtime = Runtime.from_settings(make_settings(tmp_path))
    upgrade(runtime.engine)
    runtime.wakeup = Recorder()
    writer = GroupWriter(runtime, inline=True)

    async def post(ids: list[str]) -> None:
        await asyncio.gather(*(writer.store(Incoming(i, "pull_request", b"{}", pr_payload())) for i in ids))

    try:
        asyncio.run(post(["one"]))
        assert runtime.wakeup.busy_calls == 0  # a webhook now and then never holds the worker back
        asyncio.run(post([f"burst-{i}" for i in range(25)]))
        assert runtime.wakeup.busy_calls == 1
    finally:
        writer.stop()
        runtime.close()
