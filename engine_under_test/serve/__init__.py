"""OpenAI-compatible HTTP server for the reference engine (aiohttp).

    python -m engine_under_test.serve --model DIR [--speculative-config JSON] [--port 0] ...

One engine thread owns the engine (`loop.EngineLoop`); the asyncio HTTP server (`http_api`, aiohttp)
exchanges with it through queues; request bodies are checked field by field (`request`). Flags mirror `vllm serve` (`args`); /metrics names mirror vLLM's
(`metrics`); the startup lines carry the plan figures in a fixed `key=value` format (`main`).
"""
