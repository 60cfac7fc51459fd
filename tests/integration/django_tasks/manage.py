#!/usr/bin/env python
"""The test project's manage.py: run from the repository's root (or with it on PYTHONPATH)."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.integration.django_tasks.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
