from django.db import models


class Order(models.Model):
    email = models.EmailField()
    created = models.DateTimeField(auto_now_add=True)
