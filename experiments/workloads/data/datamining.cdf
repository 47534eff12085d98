# Data-mining flow sizes (Greenberg et al., "VL2: A Scalable and Flexible Data Center Network",
# SIGCOMM 2009, Fig. 2), as digitised for the pFabric and PIAS simulations.
# columns: size in packets of 1460 bytes, cumulative probability
1 0.0
1 0.5
2 0.6
3 0.7
7 0.8
267 0.9
2107 0.95
66667 0.99
666667 1.0
