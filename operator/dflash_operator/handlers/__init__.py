"""kopf handlers: thin glue that feeds the reconcile queue and the in-memory indexes."""
