"""The Python client a trainer imports: ``from service.client import SchedulerClient``.

``scheduler_client.py`` is the HTTP side (``SchedulerClient``: requests, retries, refusals),
``actuals.py`` what a step's results say as actuals (``actual_from_result``), ``steps.py`` the guard
against reporting a step cut short (``PartialStepError``), ``args.py`` the ``TypeError`` of an argument
of the wrong type, before anything is sent, and ``wire.py`` the encoding of bodies and answers with
the exceptions a training loop catches. This package re-exports what docs/client.md
names, so ``service.client`` stays the one import path whichever module holds a name.
"""

from service.client.actuals import MalformedResultError, actual_from_result
from service.client.scheduler_client import SchedulerClient, StepResults, check_url
from service.client.steps import PartialStepError
from service.client.wire import (
    AlreadyPublishedError,
    SchedulerAPIError,
    ServiceUnreachableError,
    WithdrawnError,
)

__all__ = [
    "AlreadyPublishedError",
    "MalformedResultError",
    "PartialStepError",
    "SchedulerAPIError",
    "SchedulerClient",
    "ServiceUnreachableError",
    "StepResults",
    "WithdrawnError",
    "actual_from_result",
    "check_url",
]
