from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from .models import ApiToken


@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    new_token = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        if len(name) > 100:
            messages.error(request, "Token name: at most 100 characters.")
        else:
            _, new_token = ApiToken.issue(request.user, name)
    return render(request, "accounts/tokens.html", {
        "tokens": ApiToken.objects.filter(user=request.user),
        "new_token": new_token,
    })


@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token.revoke()
    messages.success(request, f"Token {token.hint}… revoked.")
    return redirect("tokens")
