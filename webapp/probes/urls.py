from django.urls import path

from . import views

app_name = "probes"

urlpatterns = [
    path("problem-sets/<int:pk>/probe", views.request_probe, name="request"),
]
