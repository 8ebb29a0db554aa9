"""`kubectl dflash`: a kubectl plugin to follow and steer DFlashRuns (status, list, audit,
approve, retry, logs). Reads runs through the Kubernetes API only; `audit` may download a
report from S3 when boto3 and credentials are there. Entry point: `main.py`.
"""
