"""The reference engine's models: a Qwen3.5-style hybrid target and a DFlash block drafter.

Layers compute on flat token batches described by a `ForwardBatch`; attention KV and
Gated-DeltaNet state live in the unified pool and are reached through block ids.
"""
