"""``engine-sim``: an OpenAI-compatible stand-in that SIMULATES an inference engine (no GPU, no model).

``batch`` holds the continuous-batching timing core driven by the roofline cost model, ``lengths``
decides how long each response is, ``answers`` the placeholder output a response carries (text, token
ids, log-probabilities), and ``app`` is the FastAPI server. docs/engine-sim.md explains it.
"""
