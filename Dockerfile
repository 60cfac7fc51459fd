# pgqueue image for docker-compose.yml: the `pgq` CLI with the demo tasks. For your own tasks,
# build FROM this image (or copy these lines) and add your package: `pgq work myapp.tasks:pgq`.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pgqueue ./pgqueue
COPY migrations ./migrations
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
USER nobody
