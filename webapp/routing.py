from django.urls import path

from webapp.core.consumers import NotificationsConsumer

websocket_urlpatterns = [
    path("ws/notifications/", NotificationsConsumer.as_asgi()),
]

try:
    from webapp.runs.routing import websocket_urlpatterns as run_patterns
except ModuleNotFoundError as exc:
    if exc.name != "webapp.runs.routing":
        raise
else:
    websocket_urlpatterns += run_patterns
