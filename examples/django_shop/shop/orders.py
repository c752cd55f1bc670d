"""Two ways to queue a job from a Django transaction (docs/recipes.md includes this file).

``place_order`` puts the job once the transaction has committed (``transaction.on_commit``):
a rolled-back order queues nothing, and a worker never sees an order that is not in the
database yet. If the process dies between the commit and the put, the job is lost.

``place_order_outbox`` writes the job into the outbox table in the same transaction instead,
on Django's own connection; ``manage.py stalkd_relay`` moves committed rows to the queue, so a
committed order always gets its job, even across a crash.
"""

from django.db import connection, transaction

from shop.models import Order
from shop.tasks import outbox, send_receipt


def place_order(email: str) -> Order:
    with transaction.atomic():
        order = Order.objects.create(email=email)
        transaction.on_commit(lambda: send_receipt.put({"order": order.pk}))
        return order


def place_order_outbox(email: str) -> Order:
    with transaction.atomic():
        order = Order.objects.create(email=email)
        with connection.cursor() as cursor:
            outbox.put_task_dbapi(cursor, connection.vendor, send_receipt, {"order": order.pk})
        return order
