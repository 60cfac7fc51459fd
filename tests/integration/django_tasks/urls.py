from django.urls import path

from tests.integration.django_tasks.billing.views import packed

urlpatterns = [path("orders/<int:order_id>/packed", packed)]
