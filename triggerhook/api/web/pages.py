"""The web view's pages as HTML text (pure: values in, a string out).

Plain server-rendered HTML, every value through :func:`html.escape`. The
pages load one stylesheet and one script from ``/ui/static/`` and have no
inline script or style (the CSP forbids both); without the script they show
the figures as rendered and the forms still work (the script only refreshes
the figures and asks before a cancel).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from triggerhook.api.web.auth import CSRF_FIELD
from triggerhook.api.web.figures import GROUPS
from triggerhook.api.web.forms import VIEW_FIELD, View, filter_values, listing_url
from triggerhook.api.web.timeline import timeline_svg
from triggerhook.domain.listing import Timeline
from triggerhook.domain.task import Task, TaskInfo, TaskState

TITLE = "triggerhook"
_INPUTS = (
    ("prefix", "id prefix", "e.g. order-"),
    ("routing_key", "routing key", "e.g. billing.due"),
    ("tag", "tag", "e.g. tenant:7"),
    ("due_after", "due at or after", "RFC 3339 or epoch s"),
    ("due_before", "due before", "RFC 3339 or epoch s"),
)
_LABELS = dict((name, label) for name, label, _ in _INPUTS) | {"state": "state"}


@dataclass(frozen=True, slots=True)
class Listing:
    """Everything the task list page shows. ``csrf``: the form token when
    cancelling is allowed (None: read-only, no buttons)."""

    view: View
    instance: str
    figures: dict[str, str]
    tasks: list[TaskInfo]
    count: int | None = None
    count_capped: bool = False  # count is where counting stopped: at least that many
    next_cursor: str | None = None
    timeline: Timeline | None = None
    csrf: str | None = None
    who: str | None = None  # logged in as (a login is required): offer to log out


def iso_utc(ms: int) -> str:
    """Epoch ms as ISO-8601 UTC to the millisecond: ``2030-01-01T00:00:00.250Z``."""
    moment = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _attrs(**values: str) -> str:
    return "".join(
        f' {name.rstrip("_").replace("_", "-")}="{escape(v)}"' for name, v in values.items()
    )


def page(title: str, body: str, *, who: str | None = None) -> str:
    """A whole document around ``body``; ``who``: logged in as (a log-out button)."""
    out = (
        f'<form method="post" action="/ui/logout" class="logout"><span class="who">{escape(who)}'
        '</span> <button type="submit">log out</button></form>'
        if who is not None
        else ""
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        '<link rel="stylesheet" href="/ui/static/web.css">'
        '<script src="/ui/static/web.js" defer></script></head>'
        f'<body><header><h1><a href="/ui">{TITLE}</a></h1>{out}</header>'
        f"<main>{body}</main></body></html>\n"
    )


def message_page(title: str, text: str) -> str:
    """An answer that is only a sentence (403, a refused form)."""
    body = f'<h2>{escape(title)}</h2><p class="message" id="message">{escape(text)}</p>'
    return page(f"{TITLE}: {title}", body + '<p><a href="/ui">back to the tasks</a></p>')


def login_page(error: str | None = None) -> str:
    wrong = f'<p class="error" id="error" role="alert">{escape(error)}</p>' if error else ""
    body = (
        f"<h2>Log in</h2>{wrong}"
        '<form method="post" action="/ui/login" class="login">'
        '<label for="token">API token</label>'
        '<input type="password" id="token" name="token" autocomplete="current-password" '
        "required autofocus>"
        '<button type="submit" id="login">log in</button></form>'
    )
    return page(f"{TITLE}: log in", body)


def figures_section(texts: dict[str, str]) -> str:
    """The live figures; the script refreshes each ``data-figure`` element."""
    groups = []
    for group in GROUPS:
        items = "".join(
            f"<dt>{escape(f.label)}</dt>"
            f'<dd data-figure="{escape(f.name)}">{escape(texts.get(f.name, ""))}</dd>'
            for f in group.figures
        )
        groups.append(f"<div><h3>{escape(group.title)}</h3><dl>{items}</dl></div>")
    return (
        '<section id="figures" class="figures" data-src="/ui/figures.json" data-state="loaded">'
        f"<h2>Engine</h2>{''.join(groups)}</section>"
    )


def filter_form(values: dict[str, str]) -> str:
    """The GET form; filled in with the filter as typed."""
    fields = "".join(
        f'<label>{escape(label)}<input name="{name}"'
        f"{_attrs(value=values.get(name, ''), placeholder=hint)}></label>"
        for name, label, hint in _INPUTS
    )
    chosen = values.get("state", "")
    options = "".join(
        f'<option value="{value}"{" selected" if value == chosen else ""}>{text}</option>'
        for value, text in (("", "any"), *((s.value, s.value) for s in TaskState))
    )
    return (
        '<form method="get" action="/ui" id="filter" class="filter">'
        f'{fields}<label>state<select name="state">{options}</select></label>'
        '<button type="submit">filter</button> <a href="/ui">clear</a></form>'
    )


def error_box(field: str, message: str) -> str:
    """A refused filter value, naming the field as the API does."""
    label = _LABELS.get(field, field)
    return (
        f'<p class="error" id="error" role="alert" data-field="{escape(field)}">'
        f"<strong>{escape(field)}</strong> ({escape(label)}): {escape(message)}</p>"
    )


def _cancel_form(info: TaskInfo, view: View, csrf: str) -> str:
    task_id = info.task.id
    back = urllib.parse.urlencode(filter_values(view.values))
    return (
        f'<form method="post" action="/ui/tasks/{urllib.parse.quote(task_id, safe="")}/cancel"'
        f'{_attrs(data_confirm=f"Cancel task {task_id}?")} class="cancel">'
        f'<input type="hidden" name="{CSRF_FIELD}"{_attrs(value=csrf)}>'
        f'<input type="hidden" name="{VIEW_FIELD}"{_attrs(value=back)}>'
        '<button type="submit">cancel</button></form>'
    )


def _due(task: Task) -> str:
    """The due time; a paused series' stored one is a placeholder (the latest
    due time there is), so it shows the occurrence it resumes at instead."""
    recur = task.meta.recur
    if recur is not None and recur.paused and recur.resume_ms is not None:
        return f'<time>{iso_utc(recur.resume_ms)}</time> <span class="note">on resume</span>'
    return f"<time>{iso_utc(task.due_ms)}</time>"


def _row(info: TaskInfo, view: View, csrf: str | None) -> str:
    task = info.task
    tags = " ".join(f'<span class="tag">{escape(tag)}</span>' for tag in task.meta.tags)
    action = ""
    if csrf is not None:
        can = info.state is TaskState.SCHEDULED
        action = f"<td>{_cancel_form(info, view, csrf) if can else ''}</td>"
    paused = task.meta.recur is not None and task.meta.recur.paused
    mark = ' <span class="paused">paused</span>' if paused else ""
    if info.throttled:  # a rate limit's postponement: it waits for its token (R8p)
        until = "" if info.fire_ms is None else f" until <time>{iso_utc(info.fire_ms)}</time>"
        mark += f' <span class="throttled">throttled{until}</span>'
    return (
        f'<tr data-id="{escape(task.id)}"><td class="id">{escape(task.id)}</td>'
        f"<td>{_due(task)}</td><td>{escape(task.routing_key)}</td>"
        f'<td class="state {info.state.value}">{info.state.value}{mark}</td><td>{tags}</td>'
        f"{action}</tr>"
    )


def task_table(listing: Listing) -> str:
    if not listing.tasks:
        return '<p class="empty" id="no-tasks">No task matches.</p>'
    head = "<th>id</th><th>due (UTC)</th><th>routing key</th><th>state</th><th>tags</th>"
    if listing.csrf is not None:
        head += "<th></th>"
    rows = "".join(_row(info, listing.view, listing.csrf) for info in listing.tasks)
    return f'<table id="tasks-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def bulk_form(listing: Listing) -> str:
    """Cancel everything the filter matches: only for a filter naming tasks
    by prefix, tag or routing key and no state (as the API's bulk cancel)."""
    where = listing.view.where
    if listing.csrf is None or where is None or not listing.count:
        return ""
    if not where.narrowed or where.state is not None:
        return '<p class="hint">To cancel in bulk, filter by id prefix, tag or routing key.</p>'
    hidden = "".join(
        f'<input type="hidden"{_attrs(name=key, value=value)}>'
        for key, value in filter_values(listing.view.values).items()
    )
    text = f"cancel all {_count_text(listing)} matching"
    return (
        '<form method="post" action="/ui/cancel" id="bulk-cancel" class="bulk"'
        f"{_attrs(data_confirm=f'Cancel all {_count_text(listing)} tasks this filter matches?')}>"
        f'<input type="hidden" name="{CSRF_FIELD}"{_attrs(value=listing.csrf)}>{hidden}'
        f'<button type="submit">{escape(text)}</button></form>'
    )


def _count_text(listing: Listing) -> str:
    """``1,234``; ``100,000+`` where counting stopped (the count's cap)."""
    return f"{listing.count or 0:,}{'+' if listing.count_capped else ''}"


def _pages(listing: Listing) -> str:
    links = []
    if listing.view.cursor is not None:
        links.append(
            f'<a href="{escape(listing_url(listing.view.values))}" id="first-page">first page</a>'
        )
    if listing.next_cursor is not None:
        href = listing_url(listing.view.values, cursor=listing.next_cursor)
        links.append(f'<a href="{escape(href)}" id="next-page" rel="next">next page</a>')
    return f'<nav class="pages">{" ".join(links)}</nav>' if links else ""


def _tasks_section(listing: Listing) -> str:
    view = listing.view
    if view.error is not None:
        return error_box(view.error.field, view.error.message)
    count = "" if listing.count is None else f"{_count_text(listing)} matching"
    return (
        f'<section id="tasks"><h2>Tasks <span id="count" class="count">{count}</span></h2>'
        f"{bulk_form(listing)}{task_table(listing)}{_pages(listing)}</section>"
    )


def _timeline_section(timeline: Timeline | None) -> str:
    if timeline is None:
        return ""
    span = f"{timeline.buckets * timeline.bucket_ms // 60_000} minutes"
    return (
        f'<section id="timeline" class="timeline"><h2>Due in the next {span}</h2>'
        f"{timeline_svg(timeline)}</section>"
    )


def listing_page(listing: Listing) -> str:
    """The task list: what a cancel did, the figures, the filter, the
    timeline, the matching tasks and the way to the next page."""
    notice = listing.view.notice
    status = f'<p class="notice" id="notice" role="status">{escape(notice)}</p>' if notice else ""
    mode = "" if listing.csrf is not None else '<p class="mode" id="read-only">read-only</p>'
    body = (
        f'<p class="instance">instance <strong>{escape(listing.instance)}</strong></p>{mode}'
        f"{status}{figures_section(listing.figures)}{filter_form(listing.view.values)}"
        f"{_timeline_section(listing.timeline)}{_tasks_section(listing)}"
    )
    return page(f"{TITLE}: tasks", body, who=listing.who)
