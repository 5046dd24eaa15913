"""Trajectory-length prediction from earlier epochs: features, LightGBM models, fallbacks, model store."""
