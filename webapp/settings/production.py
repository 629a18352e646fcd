"""Production (docker compose): every secret from the environment, nothing generated."""
from webapp import env

from .base import *  # noqa: F401,F403

SECRET_KEY = env.production_secret_key()
if not env.is_set("ALLOWED_HOSTS"):
    raise env.ConfigurationError("ALLOWED_HOSTS is required in production (comma-separated host names)")
DEBUG = False
SESSION_COOKIE_SECURE = env.read("SECURE_COOKIES")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_TRUSTED_ORIGINS = env.read("CSRF_TRUSTED_ORIGINS")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
