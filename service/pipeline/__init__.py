"""``POST /schedule``'s path through the service: validate -> predict -> plan -> respond -> publish.

``stages.py`` holds the stages, one function each, in the order a batch meets them; ``publish.py``
the last one, the plan written to Redis for the sidecars; ``republish.py`` what a caller-chosen
``schedule_id`` sent again gets (the stored answer, or a refusal); ``served.py`` how a served step is
accounted for (timings, metrics, its log line). The route itself is ``service/api/schedules.py``.
"""
