"""Settings of the example shop: SQLite by default (``SHOP_DB``, a file path), PostgreSQL when
``SHOP_PG_HOST`` is set (a host name or a UNIX socket directory; ``SHOP_PG_NAME``,
``SHOP_PG_USER``). The stalkd server is ``STALKD_ADDR`` (default 127.0.0.1:11300)."""

import os

SECRET_KEY = "example-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("SHOP_PG_HOST"):
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "HOST": os.environ["SHOP_PG_HOST"],
        "NAME": os.environ.get("SHOP_PG_NAME", "shop"),
        "USER": os.environ.get("SHOP_PG_USER", "shop")}}
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                             "NAME": os.environ.get("SHOP_DB", "shop.sqlite3")}}

STALKD_ADDR = os.environ.get("STALKD_ADDR", "127.0.0.1:11300")
