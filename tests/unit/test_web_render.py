"""The web view's pure parts (triggerhook/api/web/): the pages' HTML, the
timeline's SVG, the figures' texts, reading the query and the forms, and the
login and CSRF checks. No server: strings and values in, strings out. The
pages in a real browser against a real daemon: tests/integration/test_web_view.py.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from multidict import MultiDict

from triggerhook.api.web.auth import CSRF_COOKIE, SESSION_S, WebAuth
from triggerhook.api.web.figures import GROUPS, MISSING, figure_texts
from triggerhook.api.web.forms import (
    bulk_filter,
    listing_url,
    read_form,
    read_view,
    return_values,
    timeline_filter,
)
from triggerhook.api.web.pages import (
    Listing,
    error_box,
    iso_utc,
    listing_page,
    login_page,
    message_page,
)
from triggerhook.api.web.timeline import COLOURS, OTHER, series_of, timeline_svg
from triggerhook.app import Figures
from triggerhook.domain.listing import TaskFilter, Timeline
from triggerhook.domain.meta import Meta
from triggerhook.domain.recurrence import Recurrence
from triggerhook.domain.series import PARKED_MS
from triggerhook.domain.task import Task, TaskInfo, TaskState
from triggerhook.errors import ValidationError
from triggerhook.runtime import points

AT_MS = 1_893_456_000_250  # 2030-01-01T00:00:00.250Z
CSRF = "f" * 64


class Tags(HTMLParser):
    """The start tags of a document and their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.found if name == tag]


def tags_of(document: str) -> Tags:
    parser = Tags()
    parser.feed(document)
    return parser


def info(
    task_id: str, state: TaskState = TaskState.SCHEDULED, tags: tuple[str, ...] = ()
) -> TaskInfo:
    return TaskInfo(Task(task_id, AT_MS, "billing.due", meta=Meta(tags=tags)), state)


def figures(**period: float) -> Figures:
    latest = {points.ENGINE: dict(period)} if period else {}
    return Figures("engine-1", True, {"fired": 1234}, latest)


def listing(query: str = "", **fields: object) -> Listing:
    view = read_view(MultiDict(_pairs(query)))
    values: dict[str, object] = {
        "view": view,
        "instance": "engine-1",
        "figures": figure_texts(figures(), now_s=0),
        "tasks": [info("a-1", tags=("vip",)), info("a-2", TaskState.FIRING)],
        "count": 2,
        **fields,
    }
    return Listing(**values)  # type: ignore[arg-type]


def _pairs(query: str) -> list[tuple[str, str]]:
    return [tuple(part.split("=", 1)) for part in query.split("&") if part]  # type: ignore[misc]


# -- the page ---------------------------------------------------------------------------


def test_times_are_iso_8601_utc_to_the_millisecond() -> None:
    assert iso_utc(AT_MS) == "2030-01-01T00:00:00.250Z"
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"


def test_the_page_has_no_inline_script_or_style_and_loads_only_its_own_files() -> None:
    document = listing_page(listing(csrf=CSRF))
    tags = tags_of(document)
    assert [s.get("src") for s in tags.named("script")] == ["/ui/static/web.js"]
    assert [link.get("href") for link in tags.named("link")] == ["/ui/static/web.css"]
    assert tags.named("style") == []
    for _tag, attrs in tags.found:
        assert "style" not in attrs
        assert not any(name.startswith("on") for name in attrs)


def test_read_only_page_has_no_form_but_the_filter() -> None:
    document = listing_page(listing("prefix=a"))
    forms = tags_of(document).named("form")
    assert [(f.get("id"), f.get("method")) for f in forms] == [("filter", "get")]
    assert 'id="read-only"' in document
    assert CSRF not in document


def test_with_cancel_allowed_each_scheduled_task_and_the_filter_get_a_form() -> None:
    document = listing_page(listing("prefix=a", csrf=CSRF))
    tags = tags_of(document)
    posts = [f for f in tags.named("form") if f.get("method") == "post"]
    # a-2 is being published: too late to cancel, no button.
    assert [f.get("action") for f in posts] == ["/ui/cancel", "/ui/tasks/a-1/cancel"]
    hidden = {
        (i.get("name"), i.get("value")) for i in tags.named("input") if i.get("type") == "hidden"
    }
    assert {("csrf", CSRF), ("prefix", "a"), ("view", "prefix=a")} <= hidden
    assert "cancel all 2 matching" in document


@pytest.mark.parametrize("query", ["", "due_after=1", "prefix=a&state=scheduled"])
def test_no_bulk_cancel_for_a_filter_the_api_would_refuse(query: str) -> None:
    document = listing_page(listing(query, csrf=CSRF))
    assert 'action="/ui/cancel"' not in document
    assert "To cancel in bulk" in document


def test_the_rows_show_id_due_time_routing_key_state_and_tags() -> None:
    document = listing_page(listing())
    row = re.search(r'<tr data-id="a-1">.*?</tr>', document)
    assert row is not None
    text = re.sub(r"<[^>]+>", " ", row.group(0)).split()
    assert text == ["a-1", "2030-01-01T00:00:00.250Z", "billing.due", "scheduled", "vip"]
    assert '<span id="count" class="count">2 matching</span>' in document


def test_a_paused_series_shows_paused_and_the_occurrence_it_resumes_at() -> None:
    recur = Recurrence(every_ms=60_000, paused=True, resume_ms=AT_MS)
    parked = Task("s-1", PARKED_MS, "billing.due", meta=Meta(recur=recur))
    # Paused while its occurrence was being published: that one's time, until confirmed.
    publishing = Recurrence(every_ms=60_000, paused=True)
    busy = Task("s-2", AT_MS, "billing.due", meta=Meta(recur=publishing))
    running = Task("s-3", AT_MS, "billing.due", meta=Meta(recur=Recurrence(every_ms=60_000)))
    tasks = [TaskInfo(parked, TaskState.SCHEDULED), TaskInfo(busy, TaskState.FIRING)]
    document = listing_page(listing(tasks=[*tasks, TaskInfo(running, TaskState.SCHEDULED)]))
    rows = {
        task_id: re.sub(r"<[^>]+>", " ", row).split()
        for task_id, row in re.findall(r'<tr data-id="([^"]+)">(.*?)</tr>', document)
    }
    when = "2030-01-01T00:00:00.250Z"
    assert rows["s-1"] == ["s-1", when, "on", "resume", "billing.due", "scheduled", "paused"]
    assert rows["s-2"] == ["s-2", when, "billing.due", "firing", "paused"]
    assert rows["s-3"] == ["s-3", when, "billing.due", "scheduled"]
    assert iso_utc(PARKED_MS) not in document  # the placeholder is never shown
    assert '<span class="paused">paused</span>' in document  # styled (web.css)


def test_a_throttled_task_shows_throttled_and_until_when() -> None:
    waiting = TaskInfo(Task("w-1", AT_MS, "billing.due"), TaskState.SCHEDULED, True, AT_MS + 60_000)
    document = listing_page(listing(tasks=[waiting, info("w-2")]))
    rows = {
        task_id: re.sub(r"<[^>]+>", " ", row).split()
        for task_id, row in re.findall(r'<tr data-id="([^"]+)">(.*?)</tr>', document)
    }
    when, until = "2030-01-01T00:00:00.250Z", "2030-01-01T00:01:00.250Z"
    assert rows["w-1"] == ["w-1", when, "billing.due", "scheduled", "throttled", "until", until]
    assert rows["w-2"] == ["w-2", when, "billing.due", "scheduled"]
    assert '<span class="throttled">' in document  # styled (web.css)


def test_the_next_page_link_keeps_the_filter_and_carries_the_cursor() -> None:
    document = listing_page(listing("tag=vip&cursor=abc", next_cursor="MTox"))
    hrefs = [a.get("href") for a in tags_of(document).named("a")]
    assert "/ui?tag=vip&cursor=MTox" in hrefs
    assert "/ui?tag=vip" in hrefs  # the first page


def test_a_refused_filter_names_the_field_and_keeps_what_was_typed() -> None:
    view = read_view(MultiDict([("due_before", "next <tuesday>"), ("tag", "vip")]))
    assert view.where is None and view.error is not None and view.error.field == "due_before"
    document = listing_page(listing(view=view, tasks=[], count=None))
    assert 'data-field="due_before"' in document
    assert 'value="next &lt;tuesday&gt;"' in document
    assert "<tuesday>" not in document
    assert 'id="tasks-table"' not in document


def test_error_box_and_message_pages_escape_their_text() -> None:
    assert "<script>" not in error_box("x", "<script>alert(1)</script>")
    assert "&lt;b&gt;" in message_page("refused", "<b>")
    assert "&lt;i&gt;" in login_page("<i>")
    assert 'id="error"' not in login_page()


def test_the_figures_are_rendered_with_their_names_for_the_script() -> None:
    document = listing_page(listing())
    names = {attrs.get("data-figure") for attrs in tags_of(document).named("dd")}
    assert names == {f.name for group in GROUPS for f in group.figures}
    assert '<dd data-figure="fired_total">1,234</dd>' in document


# -- figures ------------------------------------------------------------------------------------


def test_rates_are_per_second_of_the_period_and_lateness_in_ms() -> None:
    texts = figure_texts(
        figures(period_ms=2000, fired=10, scheduled=3, lateness_p50_ms=1.25, tasks_db=12345),
        now_s=3661,
    )
    assert (texts["fired_rate"], texts["scheduled_rate"]) == ("5.0", "1.5")
    assert texts["confirmed_rate"] == MISSING  # not in the period
    assert (texts["lateness_p50"], texts["lateness_max"]) == ("1.2 ms", MISSING)
    assert texts["tasks_db"] == "12,345"
    assert (texts["fired_total"], texts["running"], texts["as_of"]) == ("1,234", "yes", "01:01:01")


def test_before_the_first_metrics_period_every_period_figure_is_missing() -> None:
    texts = figure_texts(Figures("e", False, {}, {}), now_s=0)
    assert texts["fired_rate"] == texts["lateness_p99"] == texts["tasks_db"] == MISSING
    assert (texts["fired_total"], texts["running"]) == (MISSING, "no")


# -- timeline -----------------------------------------------------------------------------------


def test_an_empty_timeline_is_a_sentence() -> None:
    assert "Nothing is due" in timeline_svg(Timeline(AT_MS, 60_000, 60, {}))
    assert "Nothing is due" in timeline_svg(Timeline(AT_MS, 60_000, 2, {"k": [0, 0]}))


def test_the_timeline_stacks_a_bar_per_key_and_bucket_with_its_numbers() -> None:
    start = 1_893_456_000_000  # 00:00 UTC
    svg = timeline_svg(Timeline(start, 60_000, 3, {"a": [1, 0, 2], "b": [0, 0, 4]}))
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert titles[1:] == ["00:00 UTC, a: 1", "00:02 UTC, b: 4", "00:02 UTC, a: 2"]
    assert svg.count("<rect") == 3
    heights = [float(h) for h in re.findall(r' height="([0-9.]+)"', svg)]
    assert heights[1] == pytest.approx(
        2 * heights[2], abs=0.2
    )  # b's 4 twice a's 2, in the tallest bar
    legend = re.findall(r"<li>(.*?)</li>", svg)
    assert [re.sub(r"<[^>]+>", "", item) for item in legend] == ["b 4", "a 3"]


def test_beyond_the_colours_the_quietest_keys_share_one_series() -> None:
    counts = {f"key{i}": [i, 1] for i in range(COLOURS + 3)}
    series = series_of(Timeline(0, 1000, 2, counts))
    assert [s.key for s in series[:2]] == [f"key{COLOURS + 2}", f"key{COLOURS + 1}"]
    assert series[-1].key == OTHER and series[-1].colour == COLOURS
    assert series[-1].counts == [0 + 1 + 2, 3]
    assert sum(s.total for s in series) == sum(sum(c) for c in counts.values())


def test_routing_keys_are_escaped_in_the_chart() -> None:
    svg = timeline_svg(Timeline(0, 1000, 1, {"<b>": [1]}))
    assert "<b>" not in svg and "&lt;b&gt;" in svg


# -- the query and the forms -------------------------------------------------------------------


def test_empty_fields_mean_any_and_the_filter_is_read_as_the_api_reads_it() -> None:
    view = read_view(MultiDict(prefix="a", routing_key="", tag="", due_after="10", state=""))
    assert view.values == {"prefix": "a", "due_after": "10"}
    assert view.where == TaskFilter(prefix="a", due_after_ms=10_000)
    assert view.error is None and view.cursor is None and view.notice is None


@pytest.mark.parametrize(
    ("pairs", "field"),
    [
        ([("colour", "red")], "colour"),
        ([("tag", "a"), ("tag", "b")], "tag"),
        ([("state", "done")], "state"),
        ([("prefix", "a b")], "prefix"),
    ],
)
def test_a_bad_query_is_reported_naming_the_parameter(
    pairs: list[tuple[str, str]], field: str
) -> None:
    view = read_view(MultiDict(pairs))
    assert view.where is None and view.error is not None and view.error.field == field


@pytest.mark.parametrize(
    ("pairs", "notice"),
    [
        ([("task", "a-1"), ("outcome", "cancelled")], "a-1: cancelled"),
        ([("task", "a-1"), ("outcome", "too_late")], "a-1: too late"),
        ([("task", "a-1"), ("outcome", "not_found")], "a-1: not found"),
        ([("cancelled", "3"), ("too_late", "1")], "3 cancelled, 1 too late"),
        ([("task", "a 1"), ("outcome", "cancelled")], None),
        ([("task", "a-1"), ("outcome", "you have been hacked")], None),
        ([("cancelled", "lots"), ("too_late", "1")], None),
    ],
)
def test_a_cancels_outcome_is_only_ever_one_of_the_fixed_sentences(
    pairs: list[tuple[str, str]], notice: str | None
) -> None:
    assert read_view(MultiDict(pairs)).notice == notice


def test_listing_urls_carry_only_the_filter_in_the_forms_order() -> None:
    values = {"tag": "t:1", "prefix": "a", "routing_key": "", "view": "x"}
    assert listing_url(values) == "/ui?prefix=a&tag=t%3A1"
    assert listing_url({}, cancelled="1") == "/ui?cancelled=1"
    assert listing_url({}) == "/ui"


def test_a_form_body_is_utf8_with_each_field_once() -> None:
    assert read_form(b"csrf=x&tag=t%3A1&prefix=") == {"csrf": "x", "tag": "t:1", "prefix": ""}
    with pytest.raises(ValidationError) as refused:
        read_form(b"tag=a&tag=b")
    assert refused.value.field == "tag"
    with pytest.raises(ValidationError):
        read_form(b"tag=\xff")
    with pytest.raises(ValidationError):
        read_form(b"&".join(b"f%d=1" % i for i in range(100)))


def test_a_bulk_cancel_takes_the_apis_rules() -> None:
    typed, where = bulk_filter({"tag": "t", "prefix": "", "due_before": "100"})
    assert typed == {"tag": "t", "due_before": "100"}
    assert where == TaskFilter(tag="t", due_before_ms=100_000)
    for fields, field in (
        ({"due_after": "1"}, "filter"),
        ({"tag": "t", "state": "firing"}, "state"),
    ):
        with pytest.raises(ValidationError) as refused:
            bulk_filter(fields)
        assert refused.value.field == field


def test_a_single_cancel_returns_to_its_listing_only_when_that_is_valid() -> None:
    assert return_values({"view": "prefix=a&state=scheduled"}) == {
        "prefix": "a",
        "state": "scheduled",
    }
    assert return_values({"view": "prefix=a b"}) == {}
    assert return_values({"view": "evil=1"}) == {}
    assert return_values({}) == {}


def test_the_timeline_ignores_the_listings_due_range_and_state() -> None:
    where = TaskFilter(prefix="a", tag="t", due_after_ms=1, due_before_ms=2, state=TaskState.FIRING)
    assert timeline_filter(where) == TaskFilter(prefix="a", tag="t")


# -- login and CSRF -----------------------------------------------------------------------------


def test_a_session_cookie_names_its_token_under_the_secret_and_expires() -> None:
    auth = WebAuth("s3cret", required=True)
    session = auth.new_session("billing-api", now_s=1000)
    assert "s3cret" not in session
    assert auth.session_of(session, now_s=1000 + SESSION_S - 1) == "billing-api"
    assert auth.session_of(session, now_s=1000 + SESSION_S) is None
    # Another API process, a restart: the same secret; another secret: none.
    assert WebAuth("s3cret", required=True).session_of(session, 1000) == "billing-api"
    assert WebAuth("other", required=True).session_of(session, 1000) is None
    expires, who, mac = session.split(".", 2)
    assert auth.session_of(f"{int(expires) + 9999}.{who}.{mac}", 1000) is None  # extended
    assert auth.session_of(f"{expires}.api_token.{mac}", 1000) is None  # another token's name
    assert auth.session_of("garbage", 1000) is None
    assert auth.session_of(None, 1000) is None
    # A name with dots and colons, as token names may have.
    dotted = auth.new_session("shop.api:2026-12", 1000)
    assert auth.session_of(dotted, 1000) == "shop.api:2026-12"


def test_without_a_login_there_is_no_session() -> None:
    auth = WebAuth("", required=False)
    assert not auth.required
    assert auth.session_of(auth.new_session("api_token", 0), 0) is None


def test_a_form_token_is_genuine_only_with_its_browsers_nonce() -> None:
    auth = WebAuth("s3cret", required=True)
    nonce = auth.new_nonce()
    token = auth.form_token(nonce)
    assert auth.form_genuine({CSRF_COOKIE: nonce}, {"csrf": token})
    assert not auth.form_genuine({CSRF_COOKIE: auth.new_nonce()}, {"csrf": token})
    assert not auth.form_genuine({}, {"csrf": token})
    assert not auth.form_genuine({CSRF_COOKIE: nonce}, {})
    planted = "0" * 32  # a nonce another page set: its token cannot be made without the key
    assert not auth.form_genuine(
        {CSRF_COOKIE: planted}, {"csrf": WebAuth("guess", required=True).form_token(planted)}
    )
    assert not auth.form_genuine({CSRF_COOKIE: "not hex"}, {"csrf": token})


def test_without_a_token_the_csrf_key_is_this_processs_own() -> None:
    nonce = "1" * 32
    first, second = WebAuth("", required=False), WebAuth("", required=False)
    assert first.form_genuine({CSRF_COOKIE: nonce}, {"csrf": first.form_token(nonce)})
    assert not second.form_genuine({CSRF_COOKIE: nonce}, {"csrf": first.form_token(nonce)})
