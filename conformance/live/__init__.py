"""Live parity: engines served on a device, judged against the oracle's live figures.

    intervals   ratios of repeated measurements with a confidence interval, and the three-way verdict
    view        the figures of a run observation that are judged and kept in a live golden
    checks      the live checks of the one check table (acceptance, throughput, plan, memory, seats)
    golden      live goldens: recorded through `--snapshot-update`, judged with intervals
"""
