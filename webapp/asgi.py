"""ASGI entry point (daphne): HTTP through Django, websockets through Channels."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.accounts.auth import BearerWebsocketMiddleware  # noqa: E402
from webapp.core.realtime import ChannelLayerGuard  # noqa: E402
from webapp.problems.uploads import BodyLimitMiddleware, body_limit, refuse_oversize_bodies_in_daphne  # noqa: E402
from webapp.routing import websocket_urlpatterns  # noqa: E402

# Under daphne, a declared over-size body is refused before daphne stores any of it.
refuse_oversize_bodies_in_daphne(body_limit())

application = ProtocolTypeRouter({
    # An over-size body is refused before Django spools or parses any of it.
    "http": BodyLimitMiddleware(django_asgi_app),
    "websocket": AllowedHostsOriginValidator(ChannelLayerGuard(
        AuthMiddlewareStack(BearerWebsocketMiddleware(URLRouter(websocket_urlpatterns)))
    )),
})
