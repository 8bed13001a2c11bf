"""A real engine on this machine's CPU: vLLM's CPU build in a venv of its own
(engine_venv) and a tiny model pair with a draft that really accepts (tiny_models, run under
that venv's Python). Lets a user without a GPU drive a real engine end to end."""
