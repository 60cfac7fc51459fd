"""The dashboard end to end in a real headless Chromium (Debian's chromium + chromedriver):
the page loads, its numbers match SQL, and clicking buttons really moves jobs, all under the
dashboard's Content-Security-Policy (no violation reported, and the policy is enforced); job
search and the job page over a database of a million rows."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from benchmarks.search import fill
from pgqueue import PgQueue, chain
from pgqueue.db import views
from tests.dashboard_helpers import dashboard
from tests.helpers import scalar, spawn_worker, stop_workers, thread_worker, wait_for
from tests.integration import worker_app, workflow_app

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
T = TypeVar("T")


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    # Installed by .ci/run (apt-get install chromium chromium-driver); never downloaded.
    assert os.path.exists(CHROMIUM), "chromium is not installed: apt-get install chromium"
    assert os.path.exists(CHROMEDRIVER), "chromedriver missing: apt-get install chromium-driver"
    profile = tempfile.mkdtemp(prefix="pgq-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1500",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    # Record every CSP violation of every page from its first script on (a script injected
    # through DevTools is not itself subject to the page's policy).
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "window.cspViolations = [];"
            "document.addEventListener('securitypolicyviolation', (e) =>"
            " window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));"
        },
    )
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def fresh(read: Callable[[], T]) -> T:
    """The page re-renders a table when its data changes (every 2 s at most); an element found
    just before that is stale. Look it up again, as a user's eyes would."""
    for _ in range(50):
        try:
            return read()
        except (StaleElementReferenceException, NoSuchElementException):
            time.sleep(0.1)
    return read()


def cells(driver: WebDriver, queue: str) -> dict[str, str]:
    def read() -> dict[str, str]:
        row = driver.find_element(By.CSS_SELECTOR, f'#queues tr[data-queue="{queue}"]')
        return {
            str(td.get_attribute("data-col")): td.text
            for td in row.find_elements(By.CSS_SELECTOR, "td[data-col]")
        }

    return fresh(read)


def click(driver: WebDriver, selector: str) -> None:
    fresh(lambda: driver.find_element(By.CSS_SELECTOR, selector).click())


def text(driver: WebDriver, selector: str) -> str:
    return fresh(lambda: driver.find_element(By.CSS_SELECTOR, selector).text)


def test_dashboard_in_chromium_matches_sql_and_replays_a_dead_letter(app_dsn, conn, browser):
    pgq = worker_app.pgq
    broken = pgq.enqueue("always_fails", conn=conn)
    with thread_worker(pgq, app_dsn):
        wait_for(
            lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 1,
            message="the dead letter",
        )
    for n in range(3):
        pgq.enqueue("noop", {"n": n}, queue="emails", conn=conn)
    pgq.enqueue("noop", queue="emails", delay=3600, conn=conn)
    running = pgq.enqueue("async_sleep", {"seconds": 60}, queue="slow", conn=conn)

    with (
        thread_worker(pgq, app_dsn, queues=["slow"], shutdown_grace=0.1) as worker,
        dashboard(app_dsn) as board,
    ):
        wait_for(lambda: scalar(app_dsn, "SELECT count(*) FROM pgqueue.running_jobs") == 1)
        # What a heartbeat writes when the handler reports ctx.progress({"done": 3, "of": 8}).
        conn.execute(
            'UPDATE pgqueue.jobs SET progress = \'{"done": 3, "of": 8}\', progress_at = now()'
            " WHERE id = %s",
            (running,),
        )
        browser.get(board.url + "/")
        wait_for(
            lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"),
            message="the page to load its state",
        )
        assert browser.title == "pgqueue dashboard"

        # Every number in the queue table is the one pgqueue.queue_stats gives.
        stats = conn.execute(
            "SELECT queue, ready, scheduled, running, dead FROM pgqueue.queue_stats"
        ).fetchall()
        assert {q for q, *_ in stats} == {"default", "emails", "slow"}
        for queue, ready, scheduled, running_count, dead in stats:
            shown = cells(browser, queue)
            assert (shown["ready"], shown["scheduled"], shown["running"], shown["dead"]) == (
                str(ready),
                str(scheduled),
                str(running_count),
                str(dead),
            )
        # The running job, its worker, and the dead letter with its error and traceback.
        assert "async_sleep" in text(browser, f'#running tr[data-job="{running}"]')
        assert text(browser, f'#running tr[data-job="{running}"] td.progress') == "3/8"
        worker_text = text(browser, f'#workers tr[data-worker="{worker.worker.id}"]')
        assert "running" in worker_text and "slow" in worker_text
        dead = f'#dead tr[data-dead="{broken}"]'
        assert "ValueError: this job is broken" in text(browser, dead)
        click(browser, f"{dead} summary")  # unchanged rows are not re-rendered: stays open
        assert "raise ValueError" in text(browser, f"{dead} pre")
        # Charts are drawn (SVG, no external script): one line per queue.
        series = fresh(
            lambda: {
                line.get_attribute("data-series")
                for line in browser.find_elements(By.CSS_SELECTOR, "#depth-chart polyline")
            }
        )
        assert series == {
            "default",
            "emails",
            "slow",
        }
        scripts = [s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")]
        assert scripts == [board.url + "/static/app.js"]
        # The legend's colour swatches are set through the CSSOM, which the CSP allows (a style
        # attribute would be blocked and leave them transparent).
        swatches = fresh(
            lambda: [
                i.value_of_css_property("background-color")
                for i in browser.find_elements(By.CSS_SELECTOR, "#depth-legend i")
            ]
        )
        assert len(swatches) == 3 and "rgba(0, 0, 0, 0)" not in swatches, swatches

        # Replay: the click moves the job out of the dead letters and back into its queue.
        click(browser, f'{dead} button[data-action="replay"]')
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (broken,))
                == "ready"
            ),
            message="the replayed job",
        )
        assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.dead_letters") == 0
        wait_for(
            lambda: (
                cells(browser, "default")["dead"] == "0"
                and cells(browser, "default")["ready"] == "1"
            ),
            message="the page to show the replay",
        )
        # Pause a queue and cancel the running job from the page.
        click(browser, '#queues tr[data-queue="emails"] button[data-action="pause"]')
        wait_for(lambda: scalar(app_dsn, "SELECT paused FROM pgqueue.queues") is True)
        click(browser, f'#running tr[data-job="{running}"] button[data-action="cancel"]')
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (running,))
                == "cancelled"
            ),
            message="the cancelled job",
        )
        wait_for(
            lambda: "nothing running" in text(browser, "#running"),
            message="the page to show nothing running",
        )
        # Everything above ran under the policy without one violation; and the policy is really
        # enforced: an injected inline script does not run.
        assert browser.execute_script("return window.cspViolations") == []
        browser.execute_script(
            "const s = document.createElement('script');"
            "s.textContent = 'window.inlineRan = true';"
            "document.body.append(s);"
        )
        wait_for(
            lambda: browser.execute_script("return window.cspViolations.length") == 1,
            message="the CSP to report the inline script",
        )
        assert browser.execute_script("return window.inlineRan") is None
        shot = os.environ.get("PGQUEUE_SCREENSHOT")
        if (
            shot
        ):  # make docs/dashboard.png: PGQUEUE_SCREENSHOT=docs/dashboard.png pytest -k chromium
            Path(shot).parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(shot)


def rows_shown(driver: WebDriver) -> list[tuple[int, str, str]]:
    def read() -> list[tuple[int, str, str]]:
        shown = []
        for row in driver.find_elements(By.CSS_SELECTOR, "#results tbody tr[data-job]"):
            cols = row.find_elements(By.TAG_NAME, "td")
            shown.append((int(str(row.get_attribute("data-job"))), cols[1].text, cols[3].text))
        return shown

    return fresh(read)


def searched(driver: WebDriver) -> bool:
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-searched") == "true"


def job_page(driver: WebDriver, job_id: int) -> bool:
    return driver.find_element(By.TAG_NAME, "body").get_attribute("data-job") == str(job_id)


@pytest.mark.slow
def test_search_pages_and_job_page_in_chromium_over_a_million_rows(app_dsn, conn, browser):
    # 600,000 live jobs, 400,000 history rows and 2,000 dead letters (the benchmark's fill),
    # then jobs a real worker process moved: a dead letter with three attempts.
    fill(app_dsn, jobs=600_000, history=400_000, dead=2_000, span="1 day")
    pgq = worker_app.pgq
    broken = pgq.enqueue("always_fails", conn=conn)
    worker = spawn_worker(app_dsn, "--queue", "default")
    try:
        wait_for(
            lambda: (
                scalar(
                    app_dsn, "SELECT count(*) FROM pgqueue.dead_letters WHERE id = %s", (broken,)
                )
                == 1
            ),
            timeout=60,
            message="the dead letter",
        )
    finally:
        stop_workers([worker])
    run = workflow_app.pgq.enqueue_workflow(
        chain(workflow_app.add.s(1, 2), workflow_app.add.s(y=10), workflow_app.add.s(y=100)),
        conn=conn,
    )
    first, middle, last = run.job_ids
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") > 600_000
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.job_history") == 400_000

    reader = PgQueue(app_dsn)
    with dashboard(app_dsn) as board:
        # Search: a task and a state, as typed into the form.
        browser.get(board.url + "/#/search")
        wait_for(lambda: searched(browser), message="the first search")
        browser.find_element(By.CSS_SELECTOR, '#search-form input[name="task"]').send_keys(
            "bench.task_7"
        )
        Select(
            browser.find_element(By.CSS_SELECTOR, '#search-form select[name="state"]')
        ).select_by_value("succeeded")
        click(browser, "#search-submit")
        expected = views.search_jobs(reader, task="bench.task_7", state="succeeded")
        assert len(expected.jobs) == 50 and expected.cursor
        wait_for(
            lambda: [r[0] for r in rows_shown(browser)] == [j["id"] for j in expected.jobs],
            message="the first page of the search",
        )
        assert {(state, task) for _, state, task in rows_shown(browser)} == {
            ("succeeded", "bench.task_7")
        }
        # Next page: the cursor, through the URL (so back and forward work).
        second = views.search_jobs(
            reader, task="bench.task_7", state="succeeded", after=expected.cursor
        )
        click(browser, "#search-next")
        wait_for(
            lambda: [r[0] for r in rows_shown(browser)] == [j["id"] for j in second.jobs],
            message="the second page",
        )
        assert "after=" in browser.current_url
        browser.back()
        wait_for(
            lambda: [r[0] for r in rows_shown(browser)] == [j["id"] for j in expected.jobs],
            message="back to the first page",
        )

        # Error text finds the dead letter among a million rows; its page has every attempt.
        search_box = browser.find_element(By.CSS_SELECTOR, '#search-form input[name="error"]')
        browser.find_element(By.CSS_SELECTOR, '#search-form input[name="task"]').clear()
        Select(
            browser.find_element(By.CSS_SELECTOR, '#search-form select[name="state"]')
        ).select_by_value("dead")
        search_box.send_keys("this job is BROKEN")
        click(browser, "#search-submit")
        wait_for(
            lambda: [r[0] for r in rows_shown(browser)] == [broken],
            message="the dead letter found by its error",
        )
        click(browser, f'#results tr[data-job="{broken}"] a')
        wait_for(lambda: job_page(browser, broken), message="the job page")
        assert browser.current_url.endswith(f"#/jobs/{broken}")
        assert "always_fails" in text(browser, "#job-title")
        attempts = browser.find_elements(By.CSS_SELECTOR, "#job-errors .attempt")
        assert [a.get_attribute("data-attempt") for a in attempts] == ["1", "2", "3"]
        assert all("raise ValueError" in a.find_element(By.TAG_NAME, "pre").text for a in attempts)
        assert text(browser, '#job-fields tr[data-field="state"] td') == "dead"

        # Replay it from its page (POST with the CSRF token), then cancel it.
        click(browser, '#job-actions button[data-action="replay"]')
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (broken,))
                == "ready"
            ),
            message="the replayed job",
        )
        wait_for(
            lambda: text(browser, '#job-fields tr[data-field="state"] td') == "ready",
            message="the page to show the replay",
        )
        click(browser, '#job-actions button[data-action="cancel"]')
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (broken,))
                == "cancelled"
            ),
            message="the cancelled job",
        )
        wait_for(
            lambda: text(browser, '#job-fields tr[data-field="state"] td') == "cancelled",
            message="the page to show the cancel",
        )
        assert browser.find_elements(By.CSS_SELECTOR, "#job-actions button") == []

        # A workflow member's page links its neighbours.
        browser.get(board.url + f"/#/jobs/{middle}")
        wait_for(lambda: job_page(browser, middle), message="the middle step's page")
        assert f"#{first}" in text(browser, "#job-parents") and "ready" in text(
            browser, "#job-parents"
        )
        assert f"#{last}" in text(browser, "#job-dependents")
        click(browser, f'#job-parents li[data-neighbour="{first}"] a')
        wait_for(lambda: job_page(browser, first), message="the parent's page")
        assert text(browser, "#job-dependents").startswith(f"#{middle}")
        assert browser.execute_script("return window.cspViolations") == []
    reader.close()


def test_the_overview_names_the_snapshot_that_holds_back_vacuum(dsn, pgq, browser):
    with psycopg.connect(dsn, application_name="nightly report") as holder, dashboard(dsn) as board:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgqueue.jobs")
        pid = holder.info.backend_pid
        browser.get(board.url + "/")
        wait_for(
            lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"),
            message="the page to load its state",
        )
        row = text(browser, f'#horizon tr[data-pid="{pid}"]')
        assert "backend" in row and "nightly report" in row and "idle in transaction" in row
        assert text(browser, "#horizon-age").startswith("oldest snapshot:")
        assert text(browser, '#tables tr[data-table="jobs"]').startswith("jobs")
        # what the jobs table and its indexes would take rebuilt (pgqueue.bloat's estimate)
        assert " + " in text(browser, '#tables tr[data-table="jobs"] td[data-col="rebuilt"]')
        holder.rollback()
