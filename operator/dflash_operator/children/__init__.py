"""Pure builders of the run's children (Jobs, PyTorchJob, ConfigMap, per-run RBAC) and the
small protocol that reads each kind back (`kinds.py`). No I/O here.
"""
