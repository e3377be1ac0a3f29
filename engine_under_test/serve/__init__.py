"""OpenAI-compatible HTTP server for the reference engine (standard library only).

    python -m engine_under_test.serve --model DIR [--speculative-config JSON] [--port 0] ...

One engine thread owns the engine (`loop.EngineLoop`); HTTP handler threads exchange with it
through queues (`http_api`). Flags mirror `vllm serve` (`args`); /metrics names mirror vLLM's
(`metrics`); the startup lines carry the plan figures in a fixed `key=value` format (`main`).
"""
