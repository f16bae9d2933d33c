"""The status quo: every request's prompt goes up as text and the server runs it all."""


def split(request):
    return {"layers": 0, "codec": "bf16", "decode": "server"}
