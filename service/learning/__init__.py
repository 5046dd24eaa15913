"""Learning lengths from actuals: the durable actuals stream, the serving predictor, retraining.

``actuals.py`` stores what each trajectory really produced (``ActualsLog``: each report once, in
chunks); ``models.py`` is the serving predictor, its history synced from that stream and its model
hot-reloaded from the store (``ModelService``); ``retrain.py`` fits a new version from that history,
on demand and at step boundaries (``Retrainer``), one replica at a time under ``retrain_lock.py``'s lock,
a boundary claimed once by ``retrain_boundary.py``. The routes are ``service/api/actuals.py`` and
``service/api/models.py``; the per-worker speeds learned from the same actuals are ``service/speeds/``.
"""
