"""`conformance ladder` in open loop: `--request-rate`, `--arrival`, `--max-concurrency` against the
reference engine's server (CPU, tiny shapes, two short rungs). No timed assertion: the achieved rate
is checked to be the one the records give, not to be close to the rate asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conformance.cli.main import main
from conformance.loadgen.record import RequestRecord

CASE = {
    "id": "ladder-open-loop-tiny",
    "target": "tiny-hybrid", "draft": "tiny-dflash",
    "speculative": {"method": "dflash", "num_speculative_tokens": 8},
    "scheduler": {"max_num_seqs": 4, "max_model_len": 512, "max_num_batched_tokens": 256},
    "memory": {"kv_cache_bytes": 64 * 2**20},
    "cache": {"prefix_caching": False, "ssm_dtype": "float32"},
    "device": "h200",
    "workload": {"num_requests": 6, "prompt_tokens": 16, "output_tokens": 8, "seed": 0},
    "acceptance": {"mode": "synthetic", "mean_acceptance_length": 4.0},
}
RATES_PER_S = (5.0, 20.0)


def _case_file(tmp_path: Path) -> Path:
    f = tmp_path / "case.yaml"
    f.write_text(yaml.safe_dump(CASE))
    return f


def _achieved_request_per_s(records: list[dict]) -> float:
    starts = sorted(RequestRecord.from_json(r).start_s for r in records)
    return (len(starts) - 1) / (starts[-1] - starts[0])


def test_open_loop_ladder_records_its_arrivals_and_achieved_rate(tmp_path: Path, capsys) -> None:
    out = tmp_path / "obs.json"
    rc = main(["ladder", "--manifest", "reference", "--case", str(_case_file(tmp_path)),
               "--request-rate", ",".join(f"{r:g}" for r in RATES_PER_S), "--arrival", "constant",
               "--max-concurrency", "2", "--warmup-waves", "1", "--request-timeout-s", "60",
               "--log-dir", str(tmp_path), "--out", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.out[-3000:] + printed.err[-3000:]
    obs = json.loads(out.read_text())
    th = obs["throughput"]
    assert th["settings"] == {"mode": "open", "request_rates_per_s": list(RATES_PER_S), "arrival": "constant",
                              "burstiness": 1.0, "max_concurrency": 2, "num_repeats": 1, "num_warmup_waves": 1,
                              "min_requests_per_slot": 2}
    rungs = th["rungs"]
    assert [(r["mode"], r["request_rate_per_s"], r["arrival"], r["max_concurrency"]) for r in rungs] == [
        ("open", rate, "constant", 2) for rate in RATES_PER_S]
    for r, rate in zip(rungs, RATES_PER_S):
        assert r["status"] == "ok" and r["concurrency"] == 2 and len(r["records"]) == 6
        # constant arrivals: the schedule is exactly 1 / rate apart
        assert [x["scheduled_ms"] for x in r["records"]] == pytest.approx([i * 1e3 / rate for i in range(6)], abs=1e-3)
        assert r["scheduled_request_per_s"] == pytest.approx(rate)
        assert r["achieved_request_per_s"] == pytest.approx(_achieved_request_per_s(r["records"]), rel=1e-3)
        assert r["saturated"] in (None, "client", "concurrency_cap")
        assert (r["saturation_message"] is None) == (r["saturated"] is None)
    assert th["live"]["mode"] == "open" and th["live"]["top_rung"] is None
    assert "rate=5/s" in th["live"]["by_phase"] and "rate=20/s" in th["live"]["by_phase"]
    assert "asked /s" in printed.out and "sent /s" in printed.out and "constant" in printed.out
    assert "live.concurrency_served" in printed.out and "open-loop ladder" in printed.out


@pytest.mark.parametrize("flags, message", [
    (["--arrival", "constant"], "--arrival: open-loop flags need --request-rate"),
    (["--max-concurrency", "2", "--burstiness", "0.5"], "--burstiness, --max-concurrency: open-loop flags need"),
    (["--concurrency", "1", "--request-rate", "2"], "choose closed loop or open loop"),
    (["--request-rate", "2", "--burstiness", "0"], "burstiness: must be > 0"),
])
def test_open_loop_flags_are_refused_where_they_cannot_apply(flags, message, capsys) -> None:
    assert main(["ladder", "--manifest", "reference", "--case", "tiny-dflash-c4-k8", *flags]) == 2
    assert message in capsys.readouterr().err


def test_a_request_rate_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["ladder", "--manifest", "reference", "--case", "tiny-dflash-c4-k8", "--request-rate", "0"])
    assert exc.value.code == 2 and "request rates > 0" in capsys.readouterr().err
