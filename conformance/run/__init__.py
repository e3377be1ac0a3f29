"""The main job, `conformance run`: select cases, plan them on every available engine, judge the
observations with `conformance.checks.verdicts`, and write the run directory (observations, report, JUnit)."""
