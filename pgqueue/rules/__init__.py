"""The pure rules: values, validation and computations (job options, payloads, retry policies,
flow control, schedules, job specs, tasks, workflows, tracing). No I/O, no SQL: every other layer
stands on these."""
