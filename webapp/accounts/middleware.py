from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequiredMiddleware


class LoginRequiredMiddleware(DjangoLoginRequiredMiddleware):
    """Every page needs a login (views opt out with @login_not_required).

    The JSON API is left to its own auth so that it answers 401 with a JSON body instead of
    redirecting a script to an HTML login form.
    """

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
