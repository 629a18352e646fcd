from django.urls import path, re_path

from webapp.core.consumers import NotificationsConsumer, UnroutedConsumer
from webapp.runs.routing import websocket_urlpatterns as run_patterns

websocket_urlpatterns = [
    path("ws/notifications/", NotificationsConsumer.as_asgi()),
    *run_patterns,
    re_path(r"", UnroutedConsumer.as_asgi()),  # last: whatever nothing above serves
]
