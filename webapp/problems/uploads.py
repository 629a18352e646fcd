"""An upload handler that stops reading a file past the upload limit (nothing big reaches disk)."""
from __future__ import annotations

from django.core.files.uploadhandler import FileUploadHandler, StopUpload


class UploadLimitHandler(FileUploadHandler):
    """Put first in `request.upload_handlers`; sets `request.upload_too_large` when it stops a file.

    Usable per view (see problems.views) or for every request via settings.FILE_UPLOAD_HANDLERS.
    The rest of the request body is read and thrown away, so the browser still gets the page that
    explains the limit instead of a reset connection.
    """

    def __init__(self, request=None, max_bytes: int | None = None):
        from django.conf import settings

        super().__init__(request)
        self.max_bytes = settings.UPLOAD_MAX_BYTES if max_bytes is None else max_bytes
        self.received = 0
        request.upload_too_large = False

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.max_bytes:
            self.request.upload_too_large = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size):
        return None  # the next handler (memory or temporary file) builds the file
