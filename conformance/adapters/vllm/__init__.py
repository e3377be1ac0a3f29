"""vLLM 0.33.0 adapters: plan mode (config, KV planning, memory ledger, scheduler trace) and live argv."""
