"""The shop's tasks. ``stalkd worker shop.worker:app`` runs them (shop.worker sets Django up
first: this module reads its settings, so it cannot be the worker's target itself)."""

from django.conf import settings

from stalkd.outbox import Outbox
from stalkd.worker import App

app = App(settings.STALKD_ADDR)
outbox = Outbox()  # the stalkd_outbox table, in the shop's own database


@app.task(tube="receipts", ttr=60)
def send_receipt(payload: dict[str, int]) -> None:
    from shop.models import Order

    order = Order.objects.get(pk=payload["order"])
    print(f"receipt for order {order.pk} to {order.email}")
