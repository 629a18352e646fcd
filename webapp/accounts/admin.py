from django.contrib import admin

from .models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("hint", "name", "user", "created", "last_used", "revoked")
    readonly_fields = ("key_digest", "hint", "created", "last_used")
