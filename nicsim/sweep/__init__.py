"""Parameter sweeps: a scenario over a grid of parameters and seeds, one result directory per
point plus a combined CSV, plots and report; local processes by default, a Dask cluster on
request (`nicsim sweep`)."""
