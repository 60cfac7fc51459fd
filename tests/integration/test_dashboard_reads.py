"""The dashboard reads right, checked in headless Chromium on what a real worker wrote: rates
over a window the page states, the finished-per-minute chart on a fixed hour with empty minutes
at zero, every job id a link to its page, every time with its day in one format, replays marked
in a job's attempts, tracebacks that start in the user's code, and no blank failure rows."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from pgqueue.db import ops
from tests.dashboard_helpers import dashboard
from tests.helpers import scalar, thread_worker, wait_for
from tests.integration import worker_app
from tests.integration.test_dashboard_browser import browser, click, fresh, job_page, text

__all__ = ["browser"]  # the Chromium fixture, shared with the other browser tests

# How the page shows a time: its day, the time to the second, the zone offset (as pgq does).
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d")


def loaded(driver: WebDriver) -> bool:
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true"


@pytest.fixture(scope="module")
def scene(module_dsn: str) -> Iterator[dict[str, Any]]:
    """What an operator looks at after a busy few minutes: 40 jobs just finished, one that
    failed once then succeeded, a dead letter replayed and dead again, one job running and one
    scheduled; the dashboard is up. Built once for the module's tests (each only reads)."""
    dsn = module_dsn
    with pytest.MonkeyPatch.context() as env, psycopg.connect(dsn, autocommit=True) as conn:
        env.setenv("PGQUEUE_DSN", dsn)  # the test app's tasks and client read it
        try:
            yield from _scene(dsn, conn)
        finally:
            worker_app.close_ledger()


def _scene(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[dict[str, Any]]:
    pgq = worker_app.pgq
    # Heartbeats (which write the per-minute counts) every second.
    fast = {"lease": 3.0}
    broken = pgq.enqueue("always_fails", conn=conn)
    flaky = pgq.enqueue("flaky", {"fail_times": 1}, queue="flaky", conn=conn)
    with thread_worker(pgq, dsn, queues=["default", "flaky"], **fast):
        wait_for(
            lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1,
            message="the dead letter",
        )
        assert ops.retry(pgq, [broken]).replayed == [broken]
        wait_for(
            lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1,
            message="the replayed job to die again",
        )
        for n in range(40):
            pgq.enqueue("noop", {"n": n}, queue="emails", conn=conn)
        with thread_worker(pgq, dsn, queues=["emails"], concurrency=8, **fast):
            wait_for(
                lambda: counted(dsn, "succeeded", "emails") == 40, message="the 40 jobs counted"
            )
        wait_for(lambda: counted(dsn, "retried", "flaky") == 1, message="the flaky retry")
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (flaky,)) == 0
    # Minutes of the last hour with finished jobs, and empty minutes between them.
    conn.execute(
        "INSERT INTO pgqueue.job_counts (minute, queue, task, succeeded, retried, dead,"
        " cancelled) VALUES"
        " (date_trunc('minute', now()) - interval '30 minutes', 'reports', 'r', 12, 0, 0, 0),"
        " (date_trunc('minute', now()) - interval '20 minutes', 'reports', 'r', 6, 0, 0, 0)"
    )
    scheduled = pgq.enqueue("noop", queue="later", delay=3600, conn=conn)
    running = pgq.enqueue("async_sleep", {"seconds": 600}, queue="slow", conn=conn)
    with (
        thread_worker(pgq, dsn, queues=["slow"], shutdown_grace=0.1, **fast),
        dashboard(dsn) as board,
    ):
        wait_for(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.running_jobs") == 1)
        yield {"broken": broken, "scheduled": scheduled, "running": running, "url": board.url}


COUNTED = {
    column: f"SELECT coalesce(sum({column}), 0) FROM pgqueue.job_counts WHERE queue = %s"  # noqa: S608 - fixed names
    for column in ("succeeded", "retried")
}


def counted(dsn: str, column: str, queue: str) -> int:
    return int(scalar(dsn, COUNTED[column], (queue,)))


def open_page(browser: WebDriver, scene: dict[str, Any], path: str = "/") -> None:
    browser.get(scene["url"] + path)
    wait_for(lambda: loaded(browser), message="the page to load its state")


def test_rates_are_over_a_window_the_page_states(scene, browser):
    open_page(browser, scene)
    row = '#queues tr[data-queue="emails"]'
    # The 40 jobs that just finished read as 40 in the last five minutes, not as 0.2 a minute.
    wait_for(lambda: text(browser, f'{row} td[data-col="done"]') == "40", message="done = 40")
    assert text(browser, f'{row} td[data-col="failed"]') == "0"
    header = text(browser, "#queues thead")
    assert "done, last 5 min" in header and "done/min" not in header
    window = text(browser, "#rate-window")
    match = re.search(r"finished since (\S+ \S+), the last 5 minutes", window)
    assert match and TIMESTAMP.fullmatch(match.group(1)), window


def test_finished_per_minute_chart_is_a_fixed_hour_with_empty_minutes_at_zero(scene, browser):
    open_page(browser, scene)

    def line() -> list[tuple[float, float]]:
        polyline = browser.find_element(
            By.CSS_SELECTOR, '#throughput-chart polyline[data-series="reports"]'
        )
        return [
            (float(x), float(y))
            for x, y in (p.split(",") for p in str(polyline.get_attribute("points")).split())
        ]

    points = fresh(line)
    assert len(points) == 60, points  # one a minute for the last hour, ending now
    baseline = max(y for _, y in points)
    peaks = [i for i, (_, y) in enumerate(points) if y < baseline]
    assert len(peaks) == 2 and peaks[1] - peaks[0] == 10, points  # 30 and 20 minutes ago
    assert all(y == baseline for i, (_, y) in enumerate(points) if i not in peaks)
    # The axis is the hour ending now, whatever the data: the first point at its left edge.
    start = fresh(
        lambda: browser.find_element(By.CSS_SELECTOR, '#throughput-chart [data-axis="start"]')
    )
    assert float(str(start.get_attribute("x"))) == points[0][0]
    assert text(browser, '#throughput-chart [data-axis="end"]') == "now"
    assert "59 min ago" in text(browser, '#throughput-chart [data-axis="start"]')


@pytest.mark.parametrize("table", ["running", "waiting", "dead"])
def test_overview_ids_link_to_the_job_page(scene, browser, table):
    job = {"running": scene["running"], "waiting": scene["scheduled"], "dead": scene["broken"]}[
        table
    ]
    open_page(browser, scene)
    key = "data-dead" if table == "dead" else "data-job"
    link = f'#{table} tr[{key}="{job}"] a[href="#/jobs/{job}"]'
    assert text(browser, link) == str(job)
    click(browser, link)
    wait_for(lambda: job_page(browser, job), message=f"job {job}'s page")


def test_every_time_shows_its_day_in_one_format(scene, browser):
    open_page(browser, scene)
    wait_for(lambda: text(browser, "#dead tbody").strip() != "", message="the dead letters")
    times = fresh(
        lambda: [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#overview time")]
    )
    assert len(times) >= 5, times  # runs at, worker started and last seen, failure, died
    assert all(TIMESTAMP.fullmatch(t) for t in times), times
    browser.get(scene["url"] + f"/#/jobs/{scene['broken']}")
    wait_for(lambda: job_page(browser, scene["broken"]), message="the job page")
    fields = fresh(
        lambda: {
            str(tr.get_attribute("data-field")): tr.find_element(By.TAG_NAME, "td").text
            for tr in browser.find_elements(By.CSS_SELECTOR, "#job-fields tr")
        }
    )
    for name in ("created_at", "dead_at"):
        assert TIMESTAMP.fullmatch(fields[name]), fields
    attempt_times = [
        t.text for t in browser.find_elements(By.CSS_SELECTOR, "#job-errors .attempt time")
    ]
    assert len(attempt_times) == 6 and all(TIMESTAMP.fullmatch(t) for t in attempt_times)


def test_replays_are_marked_in_the_attempt_history(scene, browser):
    open_page(browser, scene, f"/#/jobs/{scene['broken']}")
    wait_for(lambda: job_page(browser, scene["broken"]), message="the job page")
    history = fresh(
        lambda: [
            (
                "replay"
                if "replay" in str(node.get_attribute("class"))
                else node.get_attribute("data-attempt")
            )
            for node in browser.find_elements(By.CSS_SELECTOR, "#job-errors > *")
        ]
    )
    assert history == ["1", "2", "3", "replay", "1", "2", "3"], history
    marker = text(browser, "#job-errors .replay")
    assert marker.startswith("replayed ") and TIMESTAMP.search(marker), marker


def test_tracebacks_start_in_the_users_code(scene, browser, module_dsn):
    stored = scalar(module_dsn, "SELECT errors -> -1 ->> 'traceback' FROM pgqueue.dead_letters")
    frames = re.findall(r'File "([^"]+)"', stored)
    assert frames and frames[0].endswith("tests/integration/worker_app.py"), stored
    assert "pgqueue/worker" not in stored and "ValueError: this job is broken" in stored
    open_page(browser, scene, f"/#/jobs/{scene['broken']}")
    wait_for(lambda: job_page(browser, scene["broken"]), message="the job page")
    shown = text(browser, "#job-errors pre.traceback")
    assert (
        shown.startswith("Traceback (most recent call last):\n  File")
        and "worker_app.py" in (shown.splitlines()[1])
    ), shown


def test_recent_failures_have_no_blank_rows(scene, browser):
    open_page(browser, scene)
    row = '#failures tr[data-task="flaky"]'
    wait_for(lambda: text(browser, row) != "", message="the flaky task's failures")
    cells = fresh(lambda: [td.text for td in browser.find_elements(By.CSS_SELECTOR, f"{row} td")])
    assert all(cell.strip() for cell in cells), cells
    assert "RuntimeError" in cells[4] or "not kept" in cells[4], cells
    assert TIMESTAMP.fullmatch(cells[5]), cells
    every = fresh(
        lambda: [
            [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in browser.find_elements(By.CSS_SELECTOR, "#failures tbody tr")
        ]
    )
    assert all(all(c.strip() for c in r) for r in every), every


def test_screenshot_at_a_laptop_width(scene, browser):
    browser.set_window_size(1366, 2200)
    open_page(browser, scene)
    wait_for(lambda: text(browser, "#dead tbody").strip() != "", message="the dead letters")
    shot = os.environ.get("PGQUEUE_SCREENSHOT_DIR")
    if shot:  # PGQUEUE_SCREENSHOT_DIR=/tmp/shots pytest -k screenshot
        Path(shot).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(shot) / "overview.png"))
        browser.get(scene["url"] + f"/#/jobs/{scene['broken']}")
        wait_for(lambda: job_page(browser, scene["broken"]), message="the job page")
        browser.save_screenshot(str(Path(shot) / "job.png"))
    # Nothing on the overview is wider than the window.
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth"
    )
