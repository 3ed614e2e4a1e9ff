"""The web view (/ui) of a real ``triggerhook run`` daemon, in a real headless
Chromium (Debian's /usr/bin/chromium, driven by Playwright; scripts/test
installs it: ensure_chromium in scripts/_services.sh).

Two daemons serve the module: one with an API token and web_allow_cancel on
(login, listing, filter, pagination, cancels, live figures, the screenshot),
one with neither (open and read-only); a third, per test, has the view off.
Tasks are made through the HTTP API, each test under its own id prefix or tag.
The screenshot goes to $TRIGGERHOOK_SCREENSHOT_DIR when set (docs/images for
the documentation's), else the test's tmp_path.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    expect,
    sync_playwright,
)
from support.daemon import TaskTable
from support.http import ROUTED, Api, api_daemon
from support.names import uid

CHROMIUM = "/usr/bin/chromium"
TOKEN = "web-view-test-token"
FAR_S = 4_000_000_000  # 2096: never fires during the tests
WAIT_MS = 15_000


@contextlib.contextmanager
def serving(mysql_url: str, amqp_url: str, **settings: int | str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, default_routing_key=ROUTED, **settings) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    """Behind a token, with the cancel buttons."""
    with serving(mysql_url, amqp_url, api_token=TOKEN, web_allow_cancel="true") as served:
        yield served


@pytest.fixture(scope="module")
def open_api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    """No token, the defaults otherwise: open and read-only."""
    with serving(mysql_url, amqp_url) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert os.access(CHROMIUM, os.X_OK), (
        f"{CHROMIUM} is missing: apt-get install chromium (scripts/test does: ensure_chromium)"
    )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


class Tab:
    """A fresh browser context (no cookies) and its page, recording script
    errors and console errors (a CSP violation is one; a failed load, such as
    the 401 of a refused login or the absent favicon, is not: the tests check
    statuses themselves) and accepting the cancel confirmations."""

    def __init__(self, context: BrowserContext, base_url: str) -> None:
        self.context = context
        self.base_url = base_url
        self.page: Page = context.new_page()
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", lambda dialog: dialog.accept())

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(message.text)

    def open(self, path: str, status: int = 200) -> Any:
        response = self.page.goto(self.base_url + path)
        assert response is not None and response.status == status, (path, response)
        return response

    def login(self, token: str = TOKEN) -> None:
        self.open("/ui/login")
        self.page.fill("#token", token)
        self.page.click("#login")

    def ids(self) -> list[str]:
        return [
            str(row)
            for row in self.page.locator("#tasks-table tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.id)"
            )
        ]


@contextlib.contextmanager
def browsing(browser: Browser, base_url: str, **options: Any) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 1150}, **options)
    tab = Tab(context, base_url)
    try:
        yield tab
        assert tab.errors == [], tab.errors
    finally:
        context.close()


@pytest.fixture(scope="module")
def session(browser: Browser, api: Api) -> Any:
    """The cookies of one login through the form, for every test's new tab."""
    with browsing(browser, api.url) as opened:
        opened.login()
        opened.page.wait_for_url(api.url + "/ui")
        return opened.context.storage_state()


@pytest.fixture
def tab(browser: Browser, api: Api, session: Any) -> Iterator[Tab]:
    """Logged in to the token daemon's view (the session cookie of ``session``)."""
    with browsing(browser, api.url, storage_state=session) as opened:
        yield opened


def create(http: httpx.Client, tasks: list[dict[str, Any]]) -> None:
    response = http.post("/v1/tasks/batch", json={"tasks": tasks})
    assert response.status_code == 201, response.text


def screenshot_dir(tmp_path: Path) -> Path:
    named = os.environ.get("TRIGGERHOOK_SCREENSHOT_DIR")
    folder = Path(named) if named else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# -- login -----------------------------------------------------------------------------


def test_the_pages_need_the_token_and_a_wrong_one_is_refused(browser: Browser, api: Api) -> None:
    with httpx.Client(base_url=api.url) as anonymous:
        assert anonymous.get("/ui").status_code == 303
        assert anonymous.get("/ui").headers["Location"] == "/ui/login"
        assert anonymous.get("/ui/figures.json").status_code == 401
        assert anonymous.post("/ui/cancel", data={"tag": "x"}).headers["Location"] == "/ui/login"
        assert anonymous.get("/ui/static/web.css").headers["Content-Type"].startswith("text/css")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert anonymous.get("/ui", headers=bearer).status_code == 200
        assert anonymous.get("/ui", headers={"Authorization": "Bearer nope"}).status_code == 303
    with browsing(browser, api.url) as tab:
        tab.open("/ui")  # redirected
        assert tab.page.url == api.url + "/ui/login"
        with tab.page.expect_response(lambda r: r.request.method == "POST") as answer:
            tab.login("not-the-token")
        assert answer.value.status == 401
        expect(tab.page.locator("#error")).to_have_text("That is not a token this daemon takes.")
        assert tab.context.cookies() == []
        tab.login()
        tab.page.wait_for_url(api.url + "/ui")
        [session] = [c for c in tab.context.cookies() if c["name"] == "th_session"]
        assert (session["httpOnly"], session["sameSite"], session["path"]) == (
            True,
            "Strict",
            "/ui",
        )
        assert TOKEN not in session["value"]
        with httpx.Client(base_url=api.url, cookies={"th_session": session["value"]}) as cookie:
            assert cookie.get("/ui").status_code == 200
            assert cookie.get("/v1/tasks").status_code == 401  # the cookie is not the token
        expect(tab.page.locator("#tasks")).to_be_visible()
        tab.page.click(".logout button")
        tab.page.wait_for_url(api.url + "/ui/login")
        tab.open("/ui")
        assert tab.page.url == api.url + "/ui/login"


# -- the listing --------------------------------------------------------------------------


def upcoming(prefix: str, now_s: int) -> list[dict[str, Any]]:
    """1-5 tasks every third minute of the next hour, over three routing keys."""
    keys = ("billing.due", "reminders.email", "reports.nightly")
    tasks: list[dict[str, Any]] = []
    for minute in range(4, 59, 3):
        for j in range(1 + minute * 7 % 5):
            tasks.append(
                {
                    "id": f"{prefix}-{len(tasks):03d}",
                    "at": now_s + minute * 60 + j,
                    "routing_key": keys[(minute + j) % 3 if j else 0],
                    "tags": [f"tenant:{len(tasks) % 4}"] + (["vip"] if j == 2 else []),
                }
            )
    return tasks


def test_the_page_lists_tasks_with_count_timeline_and_figures(
    tab: Tab, http: httpx.Client, tmp_path: Path
) -> None:
    prefix = uid("order")
    now_s = int(time.time())
    tasks = upcoming(prefix, now_s)
    create(http, tasks)
    response = tab.open(f"/ui?prefix={prefix}")
    headers = response.headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert tab.ids() == [t["id"] for t in tasks[:50]]  # due order, one page
    expect(tab.page.locator("#count")).to_have_text(f"{len(tasks)} matching")
    first = tab.page.locator("#tasks-table tbody tr").first
    expect(first.locator("time")).to_have_text(
        time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now_s + 240))
    )
    expect(first).to_contain_text("billing.due")
    expect(first).to_contain_text("scheduled")
    expect(first).to_contain_text("tenant:0")
    per_key: dict[str, int] = {}
    for task in tasks:
        per_key[task["routing_key"]] = per_key.get(task["routing_key"], 0) + 1
    legend = tab.page.locator("#timeline-legend li")
    expected = [f"{key} {count}" for key, count in sorted(per_key.items(), key=lambda kc: -kc[1])]
    expect(legend).to_have_text(expected)
    titles = tab.page.locator("#timeline-chart rect title").all_text_contents()
    assert sum(int(title.rsplit(": ", 1)[1]) for title in titles) == len(tasks)
    expect(tab.page.locator('[data-figure="running"]')).to_have_text("yes")
    expect(tab.page.locator("#figures")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    tab.page.screenshot(path=str(screenshot_dir(tmp_path) / "web-view.png"))
    done = http.post("/v1/tasks/cancel", json={"prefix": prefix}).json()
    assert done == {"cancelled": len(tasks), "too_late": 0, "next_cursor": None}


def test_the_filter_form_narrows_the_list_and_pages_go_on(tab: Tab, http: httpx.Client) -> None:
    prefix = uid("filter")
    tasks = [
        {"id": f"{prefix}-{i:02d}", "at": FAR_S + i, "routing_key": f"fire.{'ab'[i % 2]}"}
        for i in range(60)
    ]
    create(http, tasks)
    tab.open(f"/ui?prefix={prefix}")
    expect(tab.page.locator("#count")).to_have_text("60 matching")
    assert tab.ids() == [t["id"] for t in tasks[:50]]
    tab.page.click("#next-page")
    expect(tab.page.locator("#first-page")).to_be_visible()
    assert tab.ids() == [t["id"] for t in tasks[50:]]
    expect(tab.page.locator("#next-page")).to_have_count(0)
    tab.page.fill("#filter input[name=routing_key]", "fire.b")
    tab.page.fill("#filter input[name=due_before]", str(FAR_S + 10))
    tab.page.click("#filter button")
    expect(tab.page.locator("#count")).to_have_text("5 matching")
    assert tab.ids() == [t["id"] for t in tasks[1:10:2]]
    assert tab.page.input_value("#filter input[name=prefix]") == prefix  # kept in the form
    tab.page.select_option("#filter select[name=state]", "firing")
    tab.page.click("#filter button")
    expect(tab.page.locator("#no-tasks")).to_be_visible()
    http.post("/v1/tasks/cancel", json={"prefix": prefix})


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("due_after=soon", "due_after"),
        ("prefix=bad%20prefix", "prefix"),
        ("state=done", "state"),
        ("colour=red", "colour"),
        ("tag=a&tag=b", "tag"),
        ("cursor=bm9wZQ", "cursor"),
    ],
)
def test_a_bad_filter_value_is_shown_naming_the_field(tab: Tab, query: str, field: str) -> None:
    tab.open(f"/ui?{query}", status=422)
    error = tab.page.locator("#error")
    expect(error).to_have_attribute("data-field", field)
    expect(error.locator("strong")).to_have_text(field)
    expect(tab.page.locator("#filter")).to_be_visible()  # to correct it
    assert "Traceback" not in tab.page.content()


def test_a_bad_value_typed_into_the_form_is_shown(tab: Tab) -> None:
    tab.open("/ui")
    tab.page.fill("#filter input[name=due_before]", "next tuesday")
    tab.page.click("#filter button")
    expect(tab.page.locator("#error")).to_contain_text("due_before")
    assert tab.page.input_value("#filter input[name=due_before]") == "next tuesday"


# -- cancels ----------------------------------------------------------------------------------


def test_cancel_one_task_from_the_page(tab: Tab, http: httpx.Client) -> None:
    prefix = uid("one")
    create(http, [{"id": f"{prefix}-{i}", "at": FAR_S + i} for i in range(2)])
    tab.open(f"/ui?prefix={prefix}")
    tab.page.locator(f'tr[data-id="{prefix}-0"] form.cancel button').click()
    expect(tab.page.locator("#notice")).to_have_text(f"{prefix}-0: cancelled")
    assert tab.ids() == [f"{prefix}-1"]  # back to the same filter
    assert http.get(f"/v1/tasks/{prefix}-0").status_code == 404
    assert http.get(f"/v1/tasks/{prefix}-1").status_code == 200


def test_bulk_cancel_of_the_filter_says_what_it_did(tab: Tab, http: httpx.Client, api: Api) -> None:
    tag = uid("bulk")
    create(http, [{"id": f"{tag}-{i}", "at": FAR_S, "tags": [tag]} for i in range(4)])
    with TaskTable(api.database_url) as table:
        table.mark_firing(f"{tag}-3")  # being published: too late to cancel
    tab.open(f"/ui?tag={tag}")
    expect(tab.page.locator(f'tr[data-id="{tag}-3"] form.cancel')).to_have_count(0)
    expect(tab.page.locator("#bulk-cancel button")).to_have_text("cancel all 4 matching")
    tab.page.click("#bulk-cancel button")
    expect(tab.page.locator("#notice")).to_have_text("3 cancelled, 1 too late")
    assert tab.ids() == [f"{tag}-3"]
    counted = http.get("/v1/tasks/count", params={"tag": tag}).json()
    assert counted == {"count": 1, "at_least": False}


def test_bulk_cancel_is_offered_only_for_a_filter_naming_tasks(
    tab: Tab, http: httpx.Client
) -> None:
    prefix = uid("wide")
    create(http, [{"id": f"{prefix}-0", "at": FAR_S}])
    tab.open(f"/ui?due_after={FAR_S - 1}")
    expect(tab.page.locator("#tasks-table")).to_be_visible()
    expect(tab.page.locator("#bulk-cancel")).to_have_count(0)
    tab.open(f"/ui?prefix={prefix}&state=scheduled")
    expect(tab.page.locator("#bulk-cancel")).to_have_count(0)
    http.delete(f"/v1/tasks/{prefix}-0")


def test_a_form_without_its_token_is_refused(api: Api, http: httpx.Client) -> None:
    task_id = uid("forged")
    create(http, [{"id": task_id, "at": FAR_S}])
    forged = [
        ({"view": ""}, {}),  # no token
        ({"csrf": "0" * 64}, {"th_csrf": "0" * 32}),  # a nonce planted, a token guessed
    ]
    for fields, cookies in forged:
        with api.client() as client:
            client.cookies.update(cookies)
            answer = client.post(f"/ui/tasks/{task_id}/cancel", data=fields)
            assert answer.status_code == 403, answer.text
            assert "expired" in answer.text
            assert client.post("/ui/cancel", data={**fields, "prefix": task_id}).status_code == 403
    assert http.get(f"/v1/tasks/{task_id}").status_code == 200
    http.delete(f"/v1/tasks/{task_id}")


# -- live figures ------------------------------------------------------------------------------


def test_the_figures_refresh_while_the_page_is_open(tab: Tab, http: httpx.Client) -> None:
    tab.open("/ui")
    fired = tab.page.locator('[data-figure="fired_total"]')
    before = fired.inner_text()
    assert http.post("/v1/tasks", json={"id": uid("live"), "delay": 0}).status_code == 201
    tab.page.wait_for_function(
        "before => document.querySelector('[data-figure=fired_total]').textContent !== before",
        arg=before,
        timeout=WAIT_MS,
    )
    assert int(fired.inner_text().replace(",", "")) > int(before.replace(",", "") or 0)
    refreshes = int(tab.page.get_attribute("#figures", "data-refreshes") or 0)
    assert refreshes >= 1


def test_without_script_the_figures_are_those_rendered(browser: Browser, api: Api) -> None:
    with browsing(
        browser,
        api.url,
        java_script_enabled=False,
        extra_http_headers={"Authorization": f"Bearer {TOKEN}"},
    ) as tab:
        tab.open("/ui")
        expect(tab.page.locator('[data-figure="running"]')).to_have_text("yes")
        expect(tab.page.locator('[data-figure="as_of"]')).to_have_text(
            re.compile(r"\d\d:\d\d:\d\d")
        )
        assert tab.page.get_attribute("#figures", "data-state") == "loaded"


# -- read-only and off --------------------------------------------------------------------------


def test_read_only_by_default_no_buttons_and_cancels_refused(
    browser: Browser, open_api: Api
) -> None:
    task_id = uid("ro")
    with open_api.client() as http:
        create(http, [{"id": task_id, "at": FAR_S, "tags": ["ro"]}])
        with browsing(browser, open_api.url) as tab:
            tab.open(f"/ui?prefix={task_id}")  # no login without a token
            assert tab.ids() == [task_id]
            expect(tab.page.locator("#read-only")).to_be_visible()
            expect(tab.page.locator("form.cancel, #bulk-cancel")).to_have_count(0)
            tab.open("/ui/login")
            assert tab.page.url == open_api.url + "/ui"
        assert http.post(f"/ui/tasks/{task_id}/cancel", data={"csrf": "x"}).status_code == 403
        assert http.post("/ui/cancel", data={"prefix": task_id}).status_code == 403
        assert http.get(f"/v1/tasks/{task_id}").status_code == 200


def test_web_view_off_answers_404(mysql_url: str, amqp_url: str) -> None:
    with serving(mysql_url, amqp_url, web_view="false") as served, served.client() as http:
        assert http.get("/ui").status_code == 404
        assert http.get("/ui/static/web.js").status_code == 404
        assert http.get("/v1/tasks").status_code == 200


def test_the_view_lists_a_task_created_meanwhile(tab: Tab, http: httpx.Client) -> None:
    """Reloading shows what the API changed (nothing is cached)."""
    prefix = uid("fresh")
    tab.open(f"/ui?prefix={prefix}")
    expect(tab.page.locator("#no-tasks")).to_be_visible()
    create(http, [{"id": f"{prefix}-0", "at": FAR_S}])
    tab.page.reload()
    assert tab.ids() == [f"{prefix}-0"]
    http.delete(f"/v1/tasks/{prefix}-0")
