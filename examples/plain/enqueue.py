"""``python enqueue.py``: write an order and its job in one transaction, then wait for the
job's result (start a worker first: ``pgq work tasks:pgq``)."""

import psycopg
from tasks import add, pgq

with psycopg.connect(pgq.dsn) as conn:  # one transaction, committed at the end of the block
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, total int)")
    conn.execute("INSERT INTO orders (total) VALUES (5)")
    job = add.enqueue(2, 3, conn=conn)  # visible to workers once the order is committed

print(f"job {job}: {pgq.result(job, timeout=30)}")
