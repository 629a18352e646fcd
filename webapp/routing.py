from django.urls import path, re_path

from webapp.core.consumers import NotificationsConsumer, UnroutedConsumer

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

websocket_urlpatterns.append(re_path(r"", UnroutedConsumer.as_asgi()))  # last: whatever nothing above serves
