# Web-search flow sizes (Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010, Fig. 4),
# as digitised for the pFabric and PIAS simulations (also in PlatformLab/HomaSimulation,
# sizeDistributions/DCTCP_MsgSizeDist.txt, which interpolates between these points).
# columns: size in packets of 1460 bytes, cumulative probability
6 0.0
6 0.15
13 0.2
19 0.3
33 0.4
53 0.53
133 0.6
667 0.7
1333 0.8
3333 0.9
6667 0.97
20000 1.0
