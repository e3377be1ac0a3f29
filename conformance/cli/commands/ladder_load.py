"""The load flags of `conformance ladder`: closed loop or open loop, into one `LoadgenSettings`.

Closed loop (the default): one rung per `--concurrency` value, each holding c requests in flight.
Open loop: one rung per `--request-rate` value (requests/s), arrivals drawn by `--arrival`
(poisson, or constant spacing) with `--burstiness` (gamma-shaped gaps, as `vllm bench serve`
draws them), at most `--max-concurrency` in flight (0: no cap). The two are exclusive; an
open-loop flag without `--request-rate` is refused rather than ignored.

Contract: `add_load_arguments(parser)` adds the flags; `load_settings(args)` returns validated
settings or raises `ConformanceError` (exit 2) naming the flag.
"""

from __future__ import annotations

import argparse

from conformance.errors import ConformanceError
from conformance.loadgen import LoadgenSettings
from conformance.loadgen.arrivals import ARRIVALS

OPEN_LOOP_FLAGS = ("arrival", "burstiness", "max_concurrency")


def _comma_list(kind: type, text: str, what: str) -> tuple:
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma list of {what}: {text!r}")
    return values


def concurrencies(text: str) -> tuple[int, ...]:
    return _comma_list(int, text, "integers >= 1")


def request_rates_per_s(text: str) -> tuple[float, ...]:
    return _comma_list(float, text, "request rates > 0 (requests/s)")


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", type=concurrencies, default=None,
                   help="closed loop: comma list of concurrencies, one rung each (default 1,2,4,8,16,32)")
    g = p.add_argument_group("open loop", "one rung per request rate instead of per concurrency; each rung "
                             "reports the achieved send rate and, when it falls short, whether the client or the "
                             "engine is saturated")
    g.add_argument("--request-rate", type=request_rates_per_s, default=None, metavar="RATES",
                   help="comma list of request rates in requests/s (as vllm bench serve --request-rate)")
    g.add_argument("--arrival", choices=ARRIVALS, default=None,
                   help="arrival process: poisson (exponential gaps; the default) or constant (evenly spaced)")
    g.add_argument("--burstiness", type=float, default=None,
                   help="gamma shape of the poisson gaps (default 1: a Poisson process; < 1 burstier)")
    g.add_argument("--max-concurrency", type=int, default=None,
                   help="at most this many requests in flight; later arrivals queue for a slot (default 0: no cap)")


def load_settings(args: argparse.Namespace, **common: object) -> LoadgenSettings:
    """`common`: the settings both modes share (repeats, warm-up, timeouts)."""
    given = [f"--{name.replace('_', '-')}" for name in OPEN_LOOP_FLAGS if getattr(args, name) is not None]
    if args.request_rate is None and given:
        raise ConformanceError(f"{', '.join(given)}: open-loop flags need --request-rate")
    if args.request_rate is not None and args.concurrency is not None:
        raise ConformanceError("--concurrency and --request-rate: choose closed loop or open loop, not both")
    try:
        if args.request_rate is None:
            return LoadgenSettings(concurrencies=args.concurrency or LoadgenSettings().concurrencies, **common)
        return LoadgenSettings(request_rates_per_s=args.request_rate, arrival=args.arrival or "poisson",
                               burstiness=1.0 if args.burstiness is None else args.burstiness,
                               max_concurrency=args.max_concurrency or 0, **common)
    except ValueError as exc:
        raise ConformanceError(str(exc)) from None
