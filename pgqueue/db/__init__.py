"""Database plumbing: DSN resolution, the embedded server, named queries, connections."""
