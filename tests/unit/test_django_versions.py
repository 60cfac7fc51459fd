"""Which Django ``pip install 'pgqueue[django]'`` gives on which Python is written down: the
``[django]`` extra's markers pick Django 5.2 on Python 3.11 (the last Django that runs there)
and Django 6 on 3.12+, the classifiers name both, and the Django reference says so. Read from
pyproject.toml as an installer evaluates it (packaging's markers and specifiers)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def django_allowed(extra: str, python: str) -> list[str]:
    """The Django releases (of a few) the extra accepts on ``python``."""
    environment = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    candidates = ["4.2.20", "5.1.9", "5.2.8", "6.0.1", "6.1.3"]
    specifiers = [
        requirement.specifier
        for text in PROJECT["optional-dependencies"][extra]
        if (requirement := Requirement(text)).name == "django"
        and (requirement.marker is None or requirement.marker.evaluate(environment))
    ]
    assert len(specifiers) == 1, (extra, python, specifiers)
    return [v for v in candidates if Version(v) in specifiers[0]]


@pytest.mark.parametrize("extra", ["django", "dev"])
def test_django_5_2_on_python_3_11_and_django_6_from_3_12(extra: str) -> None:
    assert django_allowed(extra, "3.11") == ["5.2.8"]
    for python in ("3.12", "3.13"):
        assert django_allowed(extra, python) == ["6.0.1", "6.1.3"]


def test_classifiers_and_docs_name_both() -> None:
    classifiers = PROJECT["classifiers"]
    assert {"Framework :: Django :: 5.2", "Framework :: Django :: 6.0"} <= set(classifiers)
    reference = (ROOT / "docs" / "reference" / "django.md").read_text()
    assert "Python 3.11" in reference and "Django 5.2" in reference
    assert "Python 3.12" in reference and "Django 6" in reference
