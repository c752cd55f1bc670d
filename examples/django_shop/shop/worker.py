"""What ``stalkd worker shop.worker:app`` loads: Django set up first, so tasks can use the ORM."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()

from shop.tasks import app  # noqa: E402  (the app's tasks import models: Django must be ready)

__all__ = ["app"]
