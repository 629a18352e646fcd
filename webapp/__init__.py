"""Crucible's Django project: settings, URLs, ASGI/Celery entry points and the web apps."""
