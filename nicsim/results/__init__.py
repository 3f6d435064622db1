"""Results of a run as files a person can open: flows.csv, time series, summary.json, plots,
report.html."""
