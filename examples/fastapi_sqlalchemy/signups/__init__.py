"""A FastAPI + SQLAlchemy (async) app that enqueues jobs in each request's transaction."""
