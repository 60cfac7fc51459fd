"""The Python API reference pages (docs/reference/api.md, django.md, alembic.md) read whole in
the repository: ``make api-docs`` writes them from the docstrings, and they are never stale."""

from __future__ import annotations

import difflib
import importlib

import django
import pytest

from scripts import api_reference


def _needs_django_6(name: str) -> bool:
    """Django's task framework (``django.tasks``) came with Django 6, which needs Python 3.12:
    on Django 5.2 (Python 3.11) the backend's region is held as written, the rest compared."""
    return name.startswith("pgqueue.contrib.django.tasks") and django.VERSION < (6,)


def test_only_the_tasks_backend_needs_django_6():
    if django.VERSION >= (6,):
        importlib.import_module("pgqueue.contrib.django.tasks")
    else:
        with pytest.raises(ImportError, match=r"django\.tasks"):
            importlib.import_module("pgqueue.contrib.django.tasks")


@pytest.mark.parametrize("page", api_reference.PAGES, ids=lambda page: page.name)
def test_reference_page_is_current(page):
    actual = page.read_text()
    expected = api_reference.render(actual, keep=_needs_django_6)
    if actual != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    actual.splitlines(keepends=True),
                    expected.splitlines(keepends=True),
                    str(page.relative_to(api_reference.ROOT)),
                    "generated",
                )
            )[:40]
        )
        pytest.fail(f"{page.name} is stale: regenerate it with `{api_reference.COMMAND}`\n{diff}")


def test_pages_are_prose_not_stubs():
    """Every object is written out (signature and docstring), none left for a plugin."""
    for page in api_reference.PAGES:
        text = page.read_text()
        assert "\n::: " not in text, page.name
        assert text.count("<!-- ::: ") == text.count(api_reference.END), page.name
    api = api_reference.PAGES[0].read_text()
    assert "def PgQueue.result(" in api
    assert "Wait for a job's result" in api  # PgQueue.result's docstring
    assert '<a id="pgqueue.Item"></a>' in api  # anchors other pages link to


def test_a_changed_docstring_makes_the_page_stale():
    page = "# API\n\n## Errors\n\n<!-- ::: pgqueue.LeaseLost -->\nold text\n<!-- /::: -->\n"
    fresh = api_reference.render(page)
    assert "old text" not in fresh
    assert "### `pgqueue.LeaseLost`" in fresh
    assert api_reference.render(fresh) == fresh


def test_markdown_of_a_docstring():
    doc = """See :class:`~pgqueue.Task` and :meth:`pgqueue.PgQueue.result`, ``x=1``.

        For example::

            pgq.result(7)
        """
    assert api_reference.markdown(doc) == (
        "See `Task` and `pgqueue.PgQueue.result`, `x=1`.\n\nFor example:\n\n    pgq.result(7)"
    )


def test_a_region_without_its_end_is_an_error():
    with pytest.raises(ValueError, match="no end marker"):
        api_reference.render("<!-- ::: pgqueue.LeaseLost -->\n")
