"""The web dashboard: ``pgq dashboard --port 8080`` (see :mod:`pgqueue.dashboard.app`)."""

from pgqueue.dashboard.app import DashboardSettings, create_app

__all__ = ["DashboardSettings", "create_app"]
