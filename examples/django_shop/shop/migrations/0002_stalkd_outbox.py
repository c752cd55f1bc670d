"""The stalkd_outbox table, as stalkd.outbox defines it, created by Django's migrations."""

from django.db import migrations

from stalkd.outbox import Outbox


def create(apps, schema_editor):  # type: ignore[no-untyped-def]
    for sql in Outbox().create_sql(schema_editor.connection.vendor):
        schema_editor.execute(sql)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    schema_editor.execute("DROP TABLE stalkd_outbox")


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
