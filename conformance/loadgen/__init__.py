"""Load generator: an OpenAI-compatible streaming client that drives throughput ladders.

Closed loop (a rung per concurrency) or open loop (a rung per request rate, Poisson or constant
arrivals under a concurrency cap), over one or more client processes on one monotonic clock;
every rung keeps every request's record (`record`). Its own ceiling and overhead are printed by
`benchmarks/loadgen_overhead.py`, its agreement with `vllm bench serve` by
`benchmarks/loadgen_vs_vllm_bench.py`.

MLPerf LoadGen style: the workload (`Workload`) is one object, the harness settings
(`LoadgenSettings`) another, flat and frozen with units in names; the harness owns the clock,
the seeds and the order in which requests are issued. The system under test is any server
speaking POST /v1/completions with SSE streaming, on the loopback interface.

    from conformance.loadgen import LoadgenSettings, Workload, run_ladder
    rungs = run_ladder("http://127.0.0.1:8000", workload, settings, metric_names)
"""

from conformance.loadgen.settings import LoadgenSettings, MetricNames
from conformance.loadgen.workload import Workload
from conformance.loadgen.ladder import run_ladder, run_rung

__all__ = ["LoadgenSettings", "MetricNames", "Workload", "run_ladder", "run_rung"]
