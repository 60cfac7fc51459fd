"""Make docs/dashboard.png: three minutes of demo load, then a headless Chromium screenshot.

    .venv/bin/python -m benchmarks.dashboard_screenshot [docs/dashboard.png]

Runs on a private PostgreSQL 15 (Debian packages, as the tests use) with two `pgq work`
processes on the demo tasks, a paused queue and some scheduled jobs, so every part of the page
has something to show (the throughput chart needs a few minutes of history).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.dashboard_helpers import dashboard
from tests.debian_pg import pg15_cluster
from tests.helpers import PGQ, ROOT

LOAD_SECONDS = 190


def main(output: Path) -> None:
    with pg15_cluster() as cluster:
        dsn = cluster.create_pgqueue_database("app")
        os.environ["PGQUEUE_DSN"] = dsn
        from pgqueue.cli import demo

        workers = [
            subprocess.Popen(
                [PGQ, "work", "pgqueue.cli.demo:pgq", "--queue", "demo", "--concurrency", "6"],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        app = demo.pgq
        app.flow.pause_queue("reports")
        for i in range(25):
            app.enqueue("reports.build", {"month": f"2026-{i % 12 + 1:02d}"}, queue="reports")
        for i in range(8):
            app.enqueue(
                "emails.send",
                {"to": f"user{i}@example.com"},
                queue="emails",
                delay=random.randint(60, 900),
            )
        profile = tempfile.mkdtemp(prefix="pgq-shot-")
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,2300",
            f"--user-data-dir={profile}",
        ):
            options.add_argument(flag)
        try:
            with dashboard(dsn) as board:
                driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
                start = time.monotonic()
                opened = False
                while time.monotonic() - start < LOAD_SECONDS:
                    calls = []
                    for k in range(random.randint(20, 120)):
                        r = random.random()
                        if r < 0.6:
                            calls.append(demo.resize_image.s(k, width=640))
                        elif r < 0.85:
                            calls.append(demo.send_report.s(k))
                        else:
                            calls.append(demo.call_flaky_api.s(k))
                    if random.random() < 0.1:
                        calls.append(demo.parse_corrupt_file.s("invoices/2026-11.csv"))
                    app.enqueue_many(calls)
                    if not opened and time.monotonic() - start > LOAD_SECONDS - 70:
                        driver.get(board.url + "/")  # a minute of live depth samples
                        opened = True
                    time.sleep(2)
                app.enqueue_many([demo.send_report.s(k) for k in range(300)])
                time.sleep(2.5)  # slow reports running when the picture is taken
                driver.save_screenshot(str(output))
                driver.quit()
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(60)
            app.close()
            shutil.rmtree(profile, ignore_errors=True)
    print(f"wrote {output}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.png"))
