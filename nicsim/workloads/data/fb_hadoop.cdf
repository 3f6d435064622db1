# FB_Hadoop flow sizes: "<bytes> <cumulative percent>" per line, piecewise linear between points.
# Source: the Hadoop cluster measured in A. Roy et al., "Inside the Social Network's
# (Datacenter) Network", SIGCOMM 2015 (figure 6), in the form the HPCC evaluation used
# (Y. Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, traffic_gen/
# FbHdp_distribution.txt of its public simulator). Mostly small flows.
0 0
100 1
200 2
300 5
350 15
400 20
500 30
600 40
700 50
1000 60
2000 67
7000 70
30000 72
50000 82
80000 87
120000 90
300000 95
1000000 97.5
2000000 99
10000000 100
