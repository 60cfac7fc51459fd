"""What a running handler holds: its context (``current_job()``), its ``ctx.transaction()``,
batch items, and logging with the running job's fields. Above the database (the transaction
completes the job there), below the client and the worker, which both hand it jobs."""
