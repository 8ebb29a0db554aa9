"""The demo (`make demo`, `make demo-broken-data`): one DFlashRun end to end on the local control
plane, its pods run as local processes. Reused by the e2e tests at a smaller size.

environment.py sets up the cluster, S3, executor and operator; assets.py the tiny target and the
prompt sources; manifest.py the DFlashRun; live.py watches it; summary.py prints the end.
"""
