"""The routing kind's split mode (``mode = "split"``): per request, how many layers of a
Llama-3-8B-shaped model run on the client, which codec carries the hidden state up, and
where decoding continues. See docs/coinfer.md, "The split mode"."""
