"""The harness: the processes that run an engine (the probe, supervision, capped capture, the plan runners,
the live runner and its sampler, the transformers peer, an engine file's version command)."""
