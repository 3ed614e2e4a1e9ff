"""The web view: read-only pages under ``/ui`` served by the HTTP API
(docs/web-view.md). Rendering (pages, timeline, figures, forms) is pure and
kept apart from the handlers and the login and CSRF checks."""

from triggerhook.api.web.handlers import WebView, is_ui_path

__all__ = ["WebView", "is_ui_path"]
