"""An app started in the test process leaves the cycle collector as the test found it
(``tests.collector_kept``): its startup's ``gc.freeze`` is a replica's, not the test process's."""

from __future__ import annotations

import gc

from tests.collector_kept import collector_unfrozen
from tests.service.api_helpers import AppFactory


def test_what_an_app_start_froze_is_the_collectors_again_after_the_test(make_client: AppFactory) -> None:
    with collector_unfrozen():
        make_client()
        assert gc.get_freeze_count() > 0  # the startup froze the process's objects, as in a replica
    assert gc.get_freeze_count() == 0
