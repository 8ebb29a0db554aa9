"""The operator's I/O: the Kubernetes client, the action executor, events, the reconcile
loop with its work queue, and the test-only fault hook.
"""
