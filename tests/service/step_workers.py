"""A step's workers played by the protocol, one thread each, while the trainer's client waits on it.

test_client's end-to-end step and test_bound_worker_tokens' step loop each had this worker (claim its
queue, complete every item with a length derived from its sample) and the threads around the trainer's
``wait``, line for line: one copy here, so the two tests stage their step alike.
"""

from __future__ import annotations

import threading

from service.api.schemas import ScheduleResponse
from service.client import SchedulerClient, StepResults
from service.delivery import Delivery
from tests.service.finished import finished_with


def work_queue(delivery: Delivery, schedule_id: str, worker: str) -> None:
    """A worker that claims its queue until it is empty and completes each item with 100 + its sample
    index tokens: lengths a report of the step's actuals can be told apart by."""
    while leases := delivery.claim(schedule_id, worker, max_items=8):
        for lease in leases:
            delivery.complete(
                lease, finished_with(output_tokens=100 + lease.item.sample_idx, wall_time_s=0.1)
            )


def waited_while_worked(trainer: SchedulerClient, delivery: Delivery, plan: ScheduleResponse) -> StepResults:
    """The step ``plan`` published, its results as the trainer's ``wait`` collects them while a thread per
    assigned worker works its queue (each joined before this returns)."""
    workers = [
        threading.Thread(target=work_queue, args=(delivery, plan.schedule_id, w)) for w in plan.assignments
    ]
    for thread in workers:
        thread.start()
    finished = trainer.wait(plan.schedule_id, timeout_s=30, poll_ms=200)
    for thread in workers:
        thread.join()
    return finished
