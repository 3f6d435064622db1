# WebSearch flow sizes: "<bytes> <cumulative percent>" per line, piecewise linear between points.
# Source: the web search workload measured in M. Alizadeh et al., "Data Center TCP (DCTCP)",
# SIGCOMM 2010 (figure 4, query and background flows), in the form the HPCC evaluation used
# (Y. Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, traffic_gen/
# WebSearch_distribution.txt of its public simulator). Mean 1.71 MB.
0 0
10000 15
20000 20
30000 30
50000 40
80000 53
200000 60
1000000 70
2000000 80
5000000 90
10000000 97
30000000 100
